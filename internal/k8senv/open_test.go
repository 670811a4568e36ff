package k8senv

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestStreamOpenReadsThePodOnce: the pod read that opens a stream also
// verifies the env that opened it and every env expecting the same; an env
// expecting something else reads the pod once more.
func TestStreamOpenReadsThePodOnce(t *testing.T) {
	cases := []struct {
		name     string
		second   func(Target) Target
		wantGets int32
	}{
		{"same expectations", func(t Target) Target { return t }, 1},
		{"other labels", func(t Target) Target {
			t.Expect.Labels = map[string]string{}
			return t
		}, 2},
		{"no owner expected", func(t Target) Target {
			t.Expect.OwnerUID = ""
			return t
		}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			p := newPool(t, h)
			if _, err := p.Env(h.target()).FileExists(t.Context(), "."); err != nil {
				t.Fatal(err)
			}
			if n := h.podGets.Load(); n != 1 {
				t.Fatalf("%d pod reads to open a stream and verify its env, want 1", n)
			}
			if _, err := p.Env(tc.second(h.target())).FileExists(t.Context(), "."); err != nil {
				t.Fatal(err)
			}
			if n := h.podGets.Load(); n != tc.wantGets {
				t.Errorf("%d pod reads after a second env's call, want %d", n, tc.wantGets)
			}
		})
	}
}

// TestOnOpenReportsEachStage: a stream that opens reports the pod check and
// the exec handshake once each; a stream that could not open reports nothing.
func TestOnOpenReportsEachStage(t *testing.T) {
	cases := []struct {
		name    string
		pod     string
		wantErr error
		want    []string
	}{
		{"opened", "ws-1", nil, []string{StagePodCheck, StageExecHandshake}},
		{"pod of another owner", "ws-2", ErrPodMismatch, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			other := runningPod("ns", "ws-2")
			other.OwnerReferences[0].UID = "another-session"
			h.addPod(other)
			var (
				mu     sync.Mutex
				stages []string
			)
			p := newPool(t, h, func(c *Config) {
				c.OnOpen = func(stage string, _ time.Duration) {
					mu.Lock()
					defer mu.Unlock()
					stages = append(stages, stage)
				}
			})
			target := h.target()
			target.Pod = tc.pod
			env := p.Env(target)
			if err := env.Open(t.Context()); !errors.Is(err, tc.wantErr) {
				t.Fatalf("Open = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil {
				if _, err := env.ExecCommand(t.Context(), "true", tool.ExecOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(stages, tc.want) {
				t.Errorf("stages %v, want %v", stages, tc.want)
			}
		})
	}
}

// TestOpenAheadSharesItsStream: calls made during or after Open use the
// stream Open opened; in per-call mode Open opens nothing.
func TestOpenAheadSharesItsStream(t *testing.T) {
	cases := []struct {
		name      string
		mode      Mode
		wantExecs int32
	}{
		{"persistent", Persistent, 1},
		{"per call", PerCall, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			env := newPool(t, h, func(c *Config) { c.Mode = tc.mode }).Env(h.target())
			opened := make(chan error, 1)
			go func() { opened <- env.Open(t.Context()) }()
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if res, err := env.ExecCommand(t.Context(), "echo hi", tool.ExecOptions{}); err != nil || res.Stdout != "hi\n" {
						t.Errorf("call = %+v, %v", res, err)
					}
				}()
			}
			wg.Wait()
			if err := <-opened; err != nil {
				t.Fatalf("Open = %v", err)
			}
			if n := h.websocketExecs.Load() + h.spdyExecs.Load(); n != tc.wantExecs {
				t.Errorf("%d exec streams, want %d", n, tc.wantExecs)
			}
		})
	}
}
