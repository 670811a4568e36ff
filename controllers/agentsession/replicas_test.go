package agentsession

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/runner"
	"github.com/agent-operator/agent-operator/internal/shard"
)

func TestShardKeyIsTheTreesRoot(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"top-level session: itself", nil, "own-uid"},
		{"child: its root", map[string]string{agentsv1.LabelParentUID: "parent-uid", agentsv1.LabelRootUID: "root-uid"}, "root-uid"},
		{"child from before root labels: its parent", map[string]string{agentsv1.LabelParentUID: "parent-uid"}, "parent-uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{UID: "own-uid", Labels: tt.labels}}
			if got := shardKey(s); got != tt.want {
				t.Errorf("shardKey = %q, want %q", got, tt.want)
			}
		})
	}
}

// shardedScript runs one command that blocks until the test writes the file
// "release" into the workspace, then answers; a session taken over while the
// command ran resumes with the call interrupted (never run again).
const shardedScript = `turns:
  - text: "Running the job."
    toolCalls:
      - name: shell
        arguments: {command: "echo started >> runs.txt; while [ ! -f release ]; do sleep 0.05; done", timeout_ms: 120000}
  - text: "Done."
`

// shardInstall is the install id (and class) of the replicas of these tests.
const (
	shardInstall = "replicas/agent-operator"
	shardClass   = "sharded"
	// shardLease is both the replicas' membership and their claims' duration.
	shardLease = 3 * time.Second
)

// replica is one manager replica of a sharded install.
type replica struct {
	me      claim.Holder
	runner  *runner.Runner
	members *shard.Membership
	// kill cuts the replica off the API server, detaches its sessions (whose
	// claims it then cannot release, nor its membership Lease delete) and
	// stops it: to the other replicas it died.
	kill func()
}

// cutTransport fails every request once cut, as for a replica that died.
type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (c cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("replica killed")
	}
	return c.rt.RoundTrip(req)
}

// startReplica runs a replica of shardInstall until the test ends: its own
// manager (watching ns, where its membership Lease is kept), reconciler and
// runner, sharding the sessions of shardClass with its peers.
func startReplica(t *testing.T, ns, pod string) *replica {
	t.Helper()
	var cut atomic.Bool
	cfg := rest.CopyConfig(testCfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt: rt, cut: &cut} })
	opts := CacheOptions()
	opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      opts,
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("new manager of replica %s: %v", pod, err)
	}
	me := claim.Holder{Install: shardInstall, Pod: pod}
	rec, run := wireInstall(t, mgr, &claim.Claims{Me: me, Duration: shardLease, Sharded: true})
	members := &shard.Membership{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: ns, Install: shardInstall,
		Pod: pod, Duration: shardLease, Log: logr.Discard(),
		OnChange: func(shard.Ring) { _ = rec.Resync(context.Background()) }}
	if err := mgr.Add(members); err != nil {
		t.Fatal(err)
	}
	rec.Class = shardClass
	rec.Shard = members
	if err := rec.SetupWithManager(mgr); err != nil {
		t.Fatalf("set up replica %s: %v", pod, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped atomic.Bool
	stop := func(died bool) {
		if stopped.Swap(true) {
			return
		}
		if died {
			cut.Store(true)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = run.Shutdown(sctx)
		cancel()
		if err := <-done; err != nil && !died {
			t.Errorf("replica %s stopped: %v", pod, err)
		}
	}
	t.Cleanup(func() { stop(false) })
	return &replica{me: me, runner: run, members: members, kill: func() { stop(true) }}
}

// shardedSession creates a session of shardClass running shardedScript.
func shardedSession(t *testing.T, ns string) *agentsv1.AgentSession {
	t.Helper()
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("shard"), Namespace: ns, Labels: map[string]string{agentsv1.LabelClass: shardClass}},
		Spec: agentsv1.AgentSessionSpec{Prompt: "Run the job", Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted,
			Name: "demo", ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "sharded"}}},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s
}

// workspaceFile is the content of a file in s's workspace ("" if missing).
func workspaceFile(t *testing.T, s *agentsv1.AgentSession, name string) string {
	t.Helper()
	d, err := workspaces.dir(s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// Two replicas of one install shard the sessions: each session is driven by
// the replica the ring prefers, and by it alone, and both drive some. One
// replica dies mid-run (its claims and membership Lease left to expire): the
// other takes its running sessions over once their claims expired, resumes
// them from the journal without running their tool again, and every session
// succeeds.
func TestReplicasShardSessionsAndTakeOverADeadReplicasSessions(t *testing.T) {
	ns := newNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sharded", Namespace: ns}, Data: map[string]string{"script.yaml": shardedScript}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	a, b := startReplica(t, ns, "replica-a"), startReplica(t, ns, "replica-b")
	replicas := map[string]*replica{a.me.Pod: a, b.me.Pod: b}
	both := shard.NewRing(a.me.Pod, b.me.Pod)
	eventually(t, "both replicas see each other", func() error {
		for _, r := range replicas {
			if got := r.members.Ring(); !got.Equal(both) {
				return fmt.Errorf("%s sees %v", r.me.Pod, got.Members())
			}
		}
		return nil
	})

	// Ten sessions, and more in the unlikely case the ring gave them all to one replica.
	var sessions []*agentsv1.AgentSession
	perReplica := map[string]int{}
	for len(sessions) < 10 || len(perReplica) < 2 {
		if len(sessions) == 30 {
			t.Fatalf("30 sessions all preferred %v", perReplica)
		}
		s := shardedSession(t, ns)
		sessions = append(sessions, s)
		perReplica[both.Preferred(string(s.UID))]++
	}
	for _, s := range sessions {
		markPodReady(t, getPod(t, s))
	}
	driver := map[string]*replica{} // by session name
	for _, s := range sessions {
		want := replicas[both.Preferred(string(s.UID))]
		got := waitPhase(t, s, agentsv1.PhaseRunning, func(g *agentsv1.AgentSession) error {
			if g.Status.Owner != want.me.String() {
				return fmt.Errorf("owner %q, want %q", g.Status.Owner, want.me)
			}
			if !strings.Contains(workspaceFile(t, g, "runs.txt"), "started") {
				return errors.New("the command has not started")
			}
			return nil
		})
		for _, r := range replicas {
			if _, has := r.runner.Progress(got.UID); has != (r == want) {
				t.Errorf("session %s: replica %s has a runner: %t; want only %s", s.Name, r.me.Pod, has, want.me.Pod)
			}
		}
		driver[s.Name] = want
	}
	t.Logf("sessions per replica: %v", perReplica)

	killed := time.Now()
	a.kill()
	for _, s := range sessions {
		d, err := workspaces.dir(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var takeover time.Duration
	for _, s := range sessions {
		got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
			if g.Status.Owner != b.me.String() {
				return fmt.Errorf("owner %q, want %q", g.Status.Owner, b.me)
			}
			return nil
		})
		if driver[s.Name] == a {
			takeover = max(takeover, got.Status.CompletionTime.Sub(killed))
		}
		if runs := strings.Count(workspaceFile(t, got, "runs.txt"), "started"); runs != 1 {
			t.Errorf("session %s (driven by %s first): the command ran %d times, want once", s.Name, driver[s.Name].me.Pod, runs)
		}
		if got.Status.Result != "Done." {
			t.Errorf("session %s: result %q, want Done.", s.Name, got.Status.Result)
		}
	}
	// Completion times have second precision, and the dead replica renewed
	// its claims up to a third of their duration before it died: the claims
	// expired no sooner than 2s after the death, which shows as 1s.
	if takeover < shardLease/3 {
		t.Errorf("the dead replica's sessions ended %s after it died, before their claims could expire", takeover)
	}
	if limit := 2*shardLease + waitFor/2; takeover > limit {
		t.Errorf("the dead replica's sessions ended %s after it died, want within %s", takeover, limit)
	}
	t.Logf("the dead replica's %d sessions ended within %s of its death (membership and claims of %s)", perReplica[a.me.Pod], takeover, shardLease)
}
