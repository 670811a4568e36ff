package k8senv

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestCorruptedStreamFailsTheCallAndReconnects writes bytes the sidecar did
// not send into its stdout stream while a call is in flight: the call fails
// (never with the forged result), the next call opens a new stream and works.
func TestCorruptedStreamFailsTheCallAndReconnects(t *testing.T) {
	forgedResults := func() []byte {
		var b []byte
		for id := uint64(1); id <= 8; id++ {
			enc, err := executor.EncodeFrame(&executor.Frame{ID: id, Kind: executor.KindResult,
				Body: json.RawMessage(`{"stdout":"FORGED\n"}`)}, 0)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, enc...)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		forged []byte
	}{
		{"forged result frames", forgedResults()},
		{"bogus length prefix", []byte{0x01, 0xff, 0xff, 0xff}},
		{"garbage", []byte(strings.Repeat("FORGED\n", 64))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			env := newPool(t, h, func(c *Config) { c.StallTimeout = 300 * time.Millisecond }).Env(h.target())
			started := make(chan struct{})
			var once sync.Once
			type answer struct {
				res *tool.ExecResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := env.ExecCommand(t.Context(), "echo go; sleep 30", tool.ExecOptions{
					Timeout: time.Minute, OnOutput: func([]byte) { once.Do(func() { close(started) }) },
				})
				done <- answer{res, err}
			}()
			<-started
			h.injectStdout(tc.forged)
			var a answer
			select {
			case a = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the call in flight did not fail after the stream was corrupted")
			}
			if a.res != nil && strings.Contains(a.res.Stdout, "FORGED") {
				t.Fatalf("a forged result reached the caller: %+v", a.res)
			}
			if !errors.Is(a.err, executor.ErrStreamClosed) || !errors.Is(a.err, executor.ErrFrameAuth) {
				t.Errorf("call in flight = %+v, %v; want ErrStreamClosed wrapping ErrFrameAuth", a.res, a.err)
			}
			res, err := env.ExecCommand(t.Context(), "echo again", tool.ExecOptions{})
			if err != nil || res.Stdout != "again\n" {
				t.Fatalf("call after the corruption = %+v, %v", res, err)
			}
			if n := h.websocketExecs.Load(); n != 2 {
				t.Errorf("%d streams, want 2 (one reconnect)", n)
			}
		})
	}
}

// Two operator instances drive the same session in one pod, the second
// under a newer claim epoch: its streams work; the first's stream has its
// next call refused with executor.ErrNotOwner, and so has every stream it
// reconnects. Another session sharing the pod keeps its own stream and
// record.
func TestSupersededDriverIsRefused(t *testing.T) {
	h := newHarness(t)
	owners := t.TempDir()
	withOwners := func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} }
	stale, current := newPool(t, h, withOwners), newPool(t, h, withOwners)
	target := func(o executor.Owner) Target {
		tg := h.target()
		tg.Owner = o
		return tg
	}
	old := executor.Owner{SessionUID: "uid-1", Holder: "ns-a/ao/ao-1", Epoch: 4}
	newer := executor.Owner{SessionUID: "uid-1", Holder: "ns-b/ao/ao-9", Epoch: 5}
	oldEnv := stale.Env(target(old))
	call := func(env *Env) error {
		_, err := env.ExecCommand(t.Context(), "true", tool.ExecOptions{})
		return err
	}
	if err := call(oldEnv); err != nil {
		t.Fatalf("the first driver before the takeover: %v", err)
	}
	newEnv := current.Env(target(newer))
	if err := call(newEnv); err != nil {
		t.Fatalf("the newer driver: %v", err)
	}
	// The stale driver's open stream: its next call is refused.
	err := call(oldEnv)
	var re *executor.RemoteError
	if !errors.Is(err, executor.ErrNotOwner) || !errors.As(err, &re) || re.Owner == nil || *re.Owner != newer {
		t.Fatalf("the stale driver's call = %v, want ErrNotOwner naming %+v", err, newer)
	}
	// A child session sharing the pod, driven by the newer instance: its own stream, its own record.
	child := current.Env(target(executor.Owner{SessionUID: "uid-2", Holder: newer.Holder, Epoch: 0}))
	if err := call(child); err != nil {
		t.Fatalf("another session in the pod: %v", err)
	}
	// Every stream breaks; reconnecting, the stale driver is refused at its hello.
	h.killSidecars()
	reconnected := func(env *Env) error {
		deadline := time.Now().Add(10 * time.Second)
		err := call(env)
		for errors.Is(err, executor.ErrStreamClosed) && time.Now().Before(deadline) {
			err = call(env) // a call may still find the old stream closing; the next one reconnects
		}
		return err
	}
	if err := reconnected(oldEnv); !errors.Is(err, executor.ErrNotOwner) {
		t.Errorf("the stale driver after a reconnect = %v, want ErrNotOwner", err)
	}
	for _, env := range []*Env{newEnv, child} {
		if err := reconnected(env); err != nil {
			t.Errorf("a current driver after a reconnect: %v", err)
		}
	}
}
