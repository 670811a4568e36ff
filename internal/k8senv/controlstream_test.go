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
