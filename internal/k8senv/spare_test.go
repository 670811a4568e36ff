package k8senv

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

const warmLabel = "agent-operator.dev/warm-pool"

// warmPod adds the unclaimed pool pod "ns/warm-1" and returns the target a
// pool preopens it with.
func warmPod(h *harness) Target {
	p := runningPod("ns", "warm-1")
	p.Labels = map[string]string{warmLabel: "k1"}
	p.OwnerReferences = nil
	h.addPod(p)
	return Target{Namespace: "ns", Pod: "warm-1", Container: "workspace", Expect: Expect{Labels: map[string]string{warmLabel: "k1"}}}
}

// claimWarmPod relabels "ns/warm-1" as session s1's pod, like a claim.
func claimWarmPod(h *harness) { h.addPod(runningPod("ns", "warm-1")) }

// sessionTarget is session s1's target on the claimed pool pod, driven by o.
func sessionTarget(h *harness, o executor.Owner) Target {
	t := h.target()
	t.Pod, t.Container, t.Owner = "warm-1", "workspace", o
	return t
}

// preopenedPool is a pool whose sidecars keep owner records in owners,
// with a spare opened to the unclaimed pool pod "ns/warm-1".
func preopenedPool(t *testing.T, h *harness) (p *Pool, owners string) {
	t.Helper()
	owners = t.TempDir()
	p = newPool(t, h, func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} })
	if err := p.Preopen(t.Context(), warmPod(h)); err != nil {
		t.Fatalf("Preopen: %v", err)
	}
	return p, owners
}

func execStreams(h *harness) int32 { return h.websocketExecs.Load() + h.spdyExecs.Load() }

func run(t *testing.T, env *Env) error {
	t.Helper()
	res, err := env.ExecCommand(t.Context(), "echo hi", tool.ExecOptions{})
	if err == nil && res.Stdout != "hi\n" {
		return fmt.Errorf("stdout %q", res.Stdout)
	}
	return err
}

// TestSessionTakesOverTheSpare: a spare opened to an unclaimed pool pod
// (once, however often Preopen is called) becomes the pod's shared stream
// when the session that claimed the pod calls, without another exec; it
// reports the pod check and the take-over; the sidecar checks the session's
// calls against the session's owner.
func TestSessionTakesOverTheSpare(t *testing.T) {
	h := newHarness(t)
	owners := t.TempDir()
	withOwners := func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} }
	var (
		mu     sync.Mutex
		stages []string
	)
	p := newPool(t, h, withOwners, func(c *Config) {
		c.OnOpen = func(stage string, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			stages = append(stages, stage)
		}
	})
	warm := warmPod(h)
	for range 3 {
		if err := p.Preopen(t.Context(), warm); err != nil {
			t.Fatalf("Preopen: %v", err)
		}
	}
	if n := execStreams(h); n != 1 {
		t.Fatalf("%d exec streams after Preopen, want 1", n)
	}
	claimWarmPod(h)
	old := executor.Owner{SessionUID: "uid-1", Holder: "ns-a/ao/ao-1", Epoch: 4}
	env := p.Env(sessionTarget(h, old))
	if err := run(t, env); err != nil {
		t.Fatalf("the session's call: %v", err)
	}
	if n := execStreams(h); n != 1 {
		t.Errorf("%d exec streams after the session's call, want 1 (the spare)", n)
	}
	mu.Lock()
	if want := []string{StagePodCheck, StageSpare}; !slices.Equal(stages, want) {
		t.Errorf("stages %v, want %v", stages, want)
	}
	mu.Unlock()

	// The session's calls carry its owner: a newer driver supersedes it.
	newer := executor.Owner{SessionUID: "uid-1", Holder: "ns-b/ao/ao-9", Epoch: 5}
	if err := run(t, newPool(t, h, withOwners).Env(sessionTarget(h, newer))); err != nil {
		t.Fatalf("the newer driver: %v", err)
	}
	if err := run(t, env); !errors.Is(err, executor.ErrNotOwner) {
		t.Errorf("the session's call after a newer driver = %v, want ErrNotOwner", err)
	}
}

// TestSpareNotUsable: a spare that cannot serve the session is closed and
// the session opens the pod's stream, or fails exactly as it would have
// without a spare. A superseded owner is refused on the spare itself, which
// stays the pod's stream.
func TestSpareNotUsable(t *testing.T) {
	owner := executor.Owner{SessionUID: "uid-1", Holder: "ns-a/ao/ao-1", Epoch: 4}
	tests := []struct {
		name string
		// prepare runs after Preopen and the claim.
		prepare   func(t *testing.T, h *harness, p *Pool, owners string)
		claim     bool
		wantErr   error // the session's call
		wantExecs int32
	}{
		{"spare died", func(t *testing.T, h *harness, p *Pool, _ string) { h.killSidecars() }, true, nil, 2},
		{"spare dropped", func(t *testing.T, h *harness, p *Pool, _ string) { p.DropSpare("ns", "warm-1") }, true, nil, 2},
		{"pod released", func(t *testing.T, h *harness, p *Pool, _ string) { p.Release("ns", "warm-1") }, true, nil, 2},
		{"pod not claimed by the session", nil, false, ErrPodMismatch, 1},
		{"owner superseded", func(t *testing.T, h *harness, p *Pool, owners string) {
			newer := owner
			newer.Holder, newer.Epoch = "ns-b/ao/ao-9", 5
			other := newPool(t, h, func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} })
			if err := run(t, other.Env(sessionTarget(h, newer))); err != nil {
				t.Fatalf("the newer driver: %v", err)
			}
		}, true, executor.ErrNotOwner, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			p, owners := preopenedPool(t, h)
			if tt.claim {
				claimWarmPod(h)
			}
			if tt.prepare != nil {
				tt.prepare(t, h, p, owners)
			}
			err := run(t, p.Env(sessionTarget(h, owner)))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("the session's call = %v, want %v", err, tt.wantErr)
			}
			if n := execStreams(h); n != tt.wantExecs {
				t.Errorf("%d exec streams, want %d", n, tt.wantExecs)
			}
			p.mu.Lock()
			left := len(p.spares)
			p.mu.Unlock()
			if left != 0 {
				t.Errorf("%d spares left after the session opened its stream", left)
			}
		})
	}
}

// TestConcurrentSessionsShareTheSpare: two sessions calling at once on a
// pod with a spare share it as the pod's stream: no further exec.
func TestConcurrentSessionsShareTheSpare(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			h := newHarness(t)
			p, _ := preopenedPool(t, h)
			claimWarmPod(h)
			envs := []*Env{
				p.Env(sessionTarget(h, executor.Owner{SessionUID: "uid-1", Holder: "h", Epoch: 1})),
				p.Env(sessionTarget(h, executor.Owner{SessionUID: "uid-2", Holder: "h", Epoch: 1})),
			}
			var wg sync.WaitGroup
			for _, env := range envs {
				wg.Go(func() {
					if err := run(t, env); err != nil {
						t.Errorf("call: %v", err)
					}
				})
			}
			wg.Wait()
			if envs[0].pc != envs[1].pc {
				t.Fatal("two sessions of one pod do not share its stream")
			}
			if n := execStreams(h); n != 1 {
				t.Errorf("%d exec streams, want 1 (the spare)", n)
			}
		})
	}
}

// TestClaimedCopySavesThePodRead: the pod as its claim's update returned it
// (Pool.Claimed) is what the spare's take-over checks: the session's first
// call reads the pod no more. A copy that does not pass the session's
// checks is not trusted over the pod: the spare is closed and the session
// opens its stream as without one (reading the pod, a second exec).
func TestClaimedCopySavesThePodRead(t *testing.T) {
	owner := executor.Owner{SessionUID: "uid-1", Holder: "ns-a/ao/ao-1", Epoch: 4}
	tests := []struct {
		name      string
		copy      func() *corev1.Pod
		wantGets  int32 // by the session's first call
		wantExecs int32
	}{
		{"the claim's copy", func() *corev1.Pod { return runningPod("ns", "warm-1") }, 0, 1},
		{"no copy", nil, 1, 1},
		{"a copy owned by another session", func() *corev1.Pod {
			p := runningPod("ns", "warm-1")
			p.OwnerReferences[0].UID = "someone-else"
			return p
		}, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			p, _ := preopenedPool(t, h)
			claimWarmPod(h)
			if tt.copy != nil {
				p.Claimed(tt.copy())
			}
			gets := h.podGets.Load()
			if err := run(t, p.Env(sessionTarget(h, owner))); err != nil {
				t.Fatalf("the session's call: %v", err)
			}
			if n := h.podGets.Load() - gets; n != tt.wantGets {
				t.Errorf("the session's first call read the pod %d times, want %d", n, tt.wantGets)
			}
			if n := execStreams(h); n != tt.wantExecs {
				t.Errorf("%d exec streams, want %d", n, tt.wantExecs)
			}
		})
	}
}
