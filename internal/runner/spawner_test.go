package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/budget"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/pricing"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

func TestChildSession(t *testing.T) {
	parent := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: "lead", Namespace: "team", UID: "p-uid"},
		Spec: agentsv1.AgentSessionSpec{
			Prompt:    "lead the work",
			Model:     agentsv1.ModelSpec{Provider: agentsv1.ProviderAnthropic, Name: "big", APIKeySecretRef: &agentsv1.SecretKeyRef{Name: "k", Key: "a"}},
			Limits:    agentsv1.Limits{MaxTurns: 100, TokenBudget: 5000},
			Subagents: agentsv1.SubagentsSpec{MaxDepth: ptr.To[int32](2), Models: []string{"small"}},
		},
	}
	cases := []struct {
		name  string
		mode  agentsv1.SubagentWorkspaceMode
		req   tool.SpawnRequest
		check func(t *testing.T, c *agentsv1.AgentSession)
	}{
		{"shared by default, inherits the model", "", tool.SpawnRequest{Task: "write tests", WorkingDir: "tests"}, func(t *testing.T, c *agentsv1.AgentSession) {
			if c.Spec.Prompt != "write tests" || c.Spec.Model.Name != "big" || c.Spec.Model.APIKeySecretRef.Name != "k" ||
				*c.Spec.Depth != 1 || c.Spec.ParentRef.UID != "p-uid" || c.Spec.Subagents.WorkingDir != "tests" ||
				c.Spec.Limits.MaxTurns != 100 || c.Spec.Limits.TokenBudget != 5000 {
				t.Errorf("spec = %+v", c.Spec)
			}
			if c.Annotations[agentsv1.AnnotationSharedWorkspace] != "lead" || c.Labels[agentsv1.LabelParentUID] != "p-uid" {
				t.Errorf("meta = %v %v", c.Labels, c.Annotations)
			}
			if owner, uid := WorkspaceOwner(c); owner != "lead" || uid != "p-uid" {
				t.Errorf("workspace owner = %s %s", owner, uid)
			}
			if ref := metav1.GetControllerOf(c); ref == nil || ref.UID != "p-uid" || ref.Kind != "AgentSession" {
				t.Errorf("controller = %+v", ref)
			}
		}},
		{"isolated, model and turns overridden", agentsv1.SubagentWorkspaceIsolated, tool.SpawnRequest{Task: "t", Model: "small", MaxTurns: 7}, func(t *testing.T, c *agentsv1.AgentSession) {
			if c.Spec.Model.Name != "small" || c.Spec.Limits.MaxTurns != 7 {
				t.Errorf("spec = %+v", c.Spec)
			}
			if _, ok := c.Annotations[agentsv1.AnnotationSharedWorkspace]; ok {
				t.Error("an isolated child must get its own pod")
			}
			if owner, _ := WorkspaceOwner(c); owner != c.Name {
				t.Errorf("workspace owner = %s", owner)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := parent.DeepCopy()
			p.Spec.Subagents.Workspace = tc.mode
			sp := &childSpawner{parent: p}
			lim, err := sp.childLimits(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			tools, err := sp.childTools(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			c := sp.child(tc.req, lim, tools, childName(p.Name, 1))
			if c.Name != "lead-sub-1" {
				t.Errorf("name = %s", c.Name)
			}
			// Created with the controller's finalizer: the controller adds it
			// in no write of its own, one per child of a fan-out.
			if !slices.Equal(c.Finalizers, []string{agentsv1.Finalizer}) {
				t.Errorf("finalizers = %v, want [%s]", c.Finalizers, agentsv1.Finalizer)
			}
			tc.check(t, c)
		})
	}
	if n := childName(strings.Repeat("x", 59), 12); len(n) > 59 {
		t.Errorf("child name %q is longer than 59", n)
	}
}

// A spawn can only narrow the parent's limits: budgets to what the tree has
// left, the deadline to the parent's remaining working time, max_turns to
// the parent's, the model to the ones spec.subagents.models allows.
func TestChildLimitsOnlyNarrow(t *testing.T) {
	parent := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: "lead", Namespace: "team"},
		Spec: agentsv1.AgentSessionSpec{
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderAnthropic, Name: "big"},
			Limits: agentsv1.Limits{MaxTurns: 10, TokenBudget: 1000, CostBudget: "2.5",
				Deadline: &metav1.Duration{Duration: time.Hour}},
			Subagents: agentsv1.SubagentsSpec{Models: []string{"small"}},
		},
	}
	two := func(s string) pricing.Amount { a, _ := pricing.ParseAmount(s); return a }
	cases := []struct {
		name    string
		req     tool.SpawnRequest
		spent   budget.Spend
		worked  time.Duration
		wantErr string
		want    agentsv1.Limits
	}{
		{"what is left", tool.SpawnRequest{}, budget.Spend{Tokens: 400, Cost: two("1.0000005")}, 20 * time.Minute, "",
			agentsv1.Limits{MaxTurns: 10, TokenBudget: 600, CostBudget: "1.499999", Deadline: &metav1.Duration{Duration: 40 * time.Minute}}},
		{"max_turns narrows", tool.SpawnRequest{MaxTurns: 3}, budget.Spend{}, 0, "",
			agentsv1.Limits{MaxTurns: 3, TokenBudget: 1000, CostBudget: "2.5", Deadline: &metav1.Duration{Duration: time.Hour}}},
		{"max_turns never widens", tool.SpawnRequest{MaxTurns: 500}, budget.Spend{}, 0, "",
			agentsv1.Limits{MaxTurns: 10, TokenBudget: 1000, CostBudget: "2.5", Deadline: &metav1.Duration{Duration: time.Hour}}},
		{"a model the spec allows", tool.SpawnRequest{Model: "small"}, budget.Spend{}, 0, "",
			agentsv1.Limits{MaxTurns: 10, TokenBudget: 1000, CostBudget: "2.5", Deadline: &metav1.Duration{Duration: time.Hour}}},
		{"any other model", tool.SpawnRequest{Model: "huge"}, budget.Spend{}, 0, `model "huge" is not allowed for subagents; allowed: big, small`, agentsv1.Limits{}},
		{"tokens used up", tool.SpawnRequest{}, budget.Spend{Tokens: 1000}, 0, "budget is used up", agentsv1.Limits{}},
		{"deadline used up", tool.SpawnRequest{}, budget.Spend{}, time.Hour, "deadline", agentsv1.Limits{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := budget.New()
			id := ledgerID(parent.Namespace, parent.Name)
			l.Join(budget.Member{ID: id, Name: id, Limit: limitOf(parent), Own: tc.spent}, nil)
			sp := &childSpawner{parent: parent, budgets: l, worked: func() time.Duration { return tc.worked }}
			got, err := sp.childLimits(tc.req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("limits = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// countingClient counts its Get calls.
type countingClient struct {
	client.Client
	gets atomic.Int32
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Client.Get(ctx, key, obj, opts...)
}

// spawnerFixture is a real API server (envtest) with the CRDs, a started
// informer cache, a client reading from it, and a parent session.
type spawnerFixture struct {
	api    client.Client // direct: what the test (and the controller) write
	cached client.Client // reads from the informer cache, like the manager's client
	cache  cache.Cache
	parent *agentsv1.AgentSession
	// kube reads the API server's own /metrics.
	kube kubernetes.Interface
}

func newSpawnerFixture(t *testing.T) *spawnerFixture {
	t.Helper()
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := agentsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	api, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &spawnerFixture{api: api, cached: cached, cache: c, kube: kube}
	f.parent = f.session(t, "lead", nil)
	return f
}

// watch registers a child watch on the cache and starts the cache.
func (f *spawnerFixture) watch(t *testing.T) *childWatch {
	t.Helper()
	w, err := newChildWatch(t.Context(), f.cache)
	if err != nil {
		t.Fatal(err)
	}
	f.start(t)
	return w
}

// start runs the cache until the test ends (after watches were registered).
func (f *spawnerFixture) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.cache.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !f.cache.WaitForCacheSync(t.Context()) {
		t.Fatal("cache did not sync")
	}
}

// session creates a top-level session, or with spawner a child through it.
func (f *spawnerFixture) session(t *testing.T, name string, mutate func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	t.Helper()
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "lead the work",
			Model:  agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo", ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "s"}},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	if err := f.api.Create(t.Context(), s); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return s
}

// finish writes the status the controller writes when a child ends.
func (f *spawnerFixture) finish(t *testing.T, name string, phase agentsv1.Phase, result string) {
	t.Helper()
	c := &agentsv1.AgentSession{}
	if err := f.api.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: name}, c); err != nil {
		t.Fatal(err)
	}
	c.Status.Phase, c.Status.Result, c.Status.Turns = phase, result, 2
	if err := f.api.Status().Update(t.Context(), c); err != nil {
		t.Fatalf("finish %s: %v", name, err)
	}
}

// TestChildSpawnerAgainstAPIServer: limits hold under parallel spawn_agent
// calls, Wait is woken by watch events and reads only the cache, and
// AbortChildren aborts the children that still run.
func TestChildSpawnerAgainstAPIServer(t *testing.T) {
	f := newSpawnerFixture(t)
	ctx := t.Context()
	watch := f.watch(t)
	reads := &countingClient{Client: f.api} // the API server
	cached := &countingClient{Client: f.cached}
	f.parent.Spec.Subagents.MaxChildren = ptr.To[int32](2)
	sp := &childSpawner{c: cached, r: reads, parent: f.parent, watch: watch}

	t.Run("parallel spawns stop at maxChildren", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Go(func() { _, errs[i] = sp.Spawn(ctx, tool.SpawnRequest{Task: "task " + strconv.Itoa(i)}) })
		}
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
				if !strings.Contains(err.Error(), "spec.subagents.maxChildren is 2") {
					t.Errorf("error %v, want the maxChildren limit", err)
				}
			}
		}
		if failed != 1 {
			t.Errorf("%d of 3 parallel spawns failed, want 1: %v", failed, errs)
		}
	})

	t.Run("wait wakes on the watch event and reads no API", func(t *testing.T) {
		before, cacheReads := reads.gets.Load(), cached.gets.Load()
		type waited struct {
			res tool.SubAgentResult
			err error
		}
		got := make(chan waited, 1)
		go func() {
			res, err := sp.Wait(ctx, "lead-sub-1")
			got <- waited{res, err}
		}()
		// Wait subscribes before its first read and has no timer, so
		// finishing the child after that read proves the event woke it.
		testenv.Eventually(t, "the waiting call has read the cache", 30*time.Second, func() error {
			if cached.gets.Load() == cacheReads {
				return fmt.Errorf("wait has not read the child yet")
			}
			return nil
		})
		f.finish(t, "lead-sub-1", agentsv1.PhaseSucceeded, "tests written")
		w := <-got
		if w.err != nil || w.res.Output != "tests written" || !w.res.Success || w.res.TurnsUsed != 2 {
			t.Errorf("wait = %+v, %v", w.res, w.err)
		}
		if n := reads.gets.Load() - before; n != 0 {
			t.Errorf("wait made %d API reads, want 0 (cache only)", n)
		}
	})

	t.Run("a finished child frees a slot", func(t *testing.T) {
		res, err := sp.Spawn(ctx, tool.SpawnRequest{Task: "third"})
		if err != nil || res.AgentID != "lead-sub-3" {
			t.Errorf("spawn = %+v, %v", res, err)
		}
	})

	t.Run("wait on an unknown agent asks the API server once", func(t *testing.T) {
		before := reads.gets.Load()
		_, err := sp.Wait(ctx, "nobody")
		if err == nil || !strings.Contains(err.Error(), `no agent "nobody"`) {
			t.Errorf("wait = %v", err)
		}
		if n := reads.gets.Load() - before; n != 1 {
			t.Errorf("%d API reads, want 1", n)
		}
	})

	t.Run("wait refuses a session of another parent", func(t *testing.T) {
		f.session(t, "stranger", nil)
		testenv.Eventually(t, "the stranger is in the cache", 30*time.Second, func() error {
			return f.cached.Get(ctx, types.NamespacedName{Namespace: "default", Name: "stranger"}, &agentsv1.AgentSession{})
		})
		if _, err := sp.Wait(ctx, "stranger"); err == nil || !strings.Contains(err.Error(), "not a subagent") {
			t.Errorf("wait = %v", err)
		}
	})

	t.Run("a failed child is an unsuccessful result", func(t *testing.T) {
		f.finish(t, "lead-sub-2", agentsv1.PhaseFailed, "")
		res, err := sp.Wait(ctx, "lead-sub-2")
		if err != nil || res.Success {
			t.Errorf("wait = %+v, %v", res, err)
		}
	})

	t.Run("depth limit", func(t *testing.T) {
		child := &agentsv1.AgentSession{}
		if err := f.api.Get(ctx, types.NamespacedName{Namespace: "default", Name: "lead-sub-3"}, child); err != nil {
			t.Fatal(err)
		}
		deep := &childSpawner{c: f.cached, r: reads, parent: child, watch: watch}
		_, err := deep.Spawn(ctx, tool.SpawnRequest{Task: "grandchild"})
		if err == nil || !strings.Contains(err.Error(), "spec.subagents.maxDepth is 1") {
			t.Errorf("spawn from depth 1 = %v, want the depth limit", err)
		}
	})

	t.Run("AbortChildren aborts the children that run", func(t *testing.T) {
		testenv.Eventually(t, "the children are in the cache", 30*time.Second, func() error {
			var l agentsv1.AgentSessionList
			if err := f.cached.List(ctx, &l, client.MatchingLabels{agentsv1.LabelParentUID: string(f.parent.UID)}); err != nil {
				return err
			}
			if len(l.Items) != 3 {
				return fmt.Errorf("%d children in the cache", len(l.Items))
			}
			return nil
		})
		if err := AbortChildren(ctx, f.cached, f.parent); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"lead-sub-1": false, "lead-sub-2": false, "lead-sub-3": true} {
			c := &agentsv1.AgentSession{}
			if err := f.api.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, c); err != nil {
				t.Fatal(err)
			}
			if c.Spec.Abort != want {
				t.Errorf("%s: spec.abort = %v, want %v", name, c.Spec.Abort, want)
			}
		}
	})
}

// A spawn_agent call run again after a crash (a new manager, a new spawner)
// adopts the child its first run created, even when that child fills
// maxChildren: one child, not two.
func TestSpawnCallRunAgainAdoptsItsChild(t *testing.T) {
	f := newSpawnerFixture(t)
	ctx := t.Context()
	watch := f.watch(t)
	f.parent.Spec.Subagents.MaxChildren = ptr.To[int32](1)
	first := &childSpawner{c: f.cached, r: f.api, parent: f.parent, watch: watch}
	res, err := first.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_crash", Task: "one"})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	again := &childSpawner{c: f.cached, r: f.api, parent: f.parent, watch: watch}
	res2, err := again.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_crash", Task: "one"})
	if err != nil || res2.AgentID != res.AgentID {
		t.Fatalf("the same call run again = %+v, %v; want %s adopted", res2, err, res.AgentID)
	}
	if _, err := again.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_other", Task: "two"}); err == nil ||
		!strings.Contains(err.Error(), "maxChildren is 1") {
		t.Errorf("another call = %v, want the maxChildren limit (the adopted child counts)", err)
	}
	var list agentsv1.AgentSessionList
	if err := f.api.List(ctx, &list, client.InNamespace(f.parent.Namespace),
		client.MatchingLabels{agentsv1.LabelParentUID: string(f.parent.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Annotations[agentsv1.AnnotationSpawnCall] != "toolu_crash" {
		t.Errorf("children %d, want exactly one, annotated with its call id", len(list.Items))
	}
}

// lists counts the LIST requests on AgentSessions the API server has
// served (apiserver_request_total).
func (f *spawnerFixture) lists(t *testing.T) int {
	t.Helper()
	raw, err := f.kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="agentsessions"`) ||
			!strings.Contains(line, `verb="LIST"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}

// TestWideFanOutListsChildrenOnce: a spawner lists the parent's children
// from the API server once (for the children an earlier run may have made
// before a crash), not once per spawn: 40 spawns, one LIST. The children it
// made itself are still adopted when their call runs again.
func TestWideFanOutListsChildrenOnce(t *testing.T) {
	f := newSpawnerFixture(t)
	ctx := t.Context()
	watch := f.watch(t)
	f.parent.Spec.Subagents.MaxChildren = ptr.To[int32](100)
	sp := &childSpawner{c: f.cached, r: f.api, parent: f.parent, watch: watch}
	before := f.lists(t)
	const n = 40
	ids := map[string]string{}
	for i := range n {
		call := fmt.Sprintf("toolu_%d", i)
		res, err := sp.Spawn(ctx, tool.SpawnRequest{CallID: call, Task: "t"})
		if err != nil {
			t.Fatalf("spawn %d: %v", i, err)
		}
		ids[call] = res.AgentID
	}
	if got := f.lists(t) - before; got != 1 {
		t.Errorf("%d LISTs of AgentSessions for %d spawns, want 1", got, n)
	}
	// A call run again (e.g. its TOOL_CALL_END was lost) gets its child.
	f.finish(t, ids["toolu_7"], agentsv1.PhaseSucceeded, "done")
	res, err := sp.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_7", Task: "t"})
	if err != nil || res.AgentID != ids["toolu_7"] || res.Status != "completed" {
		t.Errorf("toolu_7 run again = %+v, %v; want %s, completed", res, err, ids["toolu_7"])
	}
	var list agentsv1.AgentSessionList
	if err := f.api.List(ctx, &list, client.InNamespace(f.parent.Namespace),
		client.MatchingLabels{agentsv1.LabelParentUID: string(f.parent.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Errorf("%d children, want %d", len(list.Items), n)
	}
}

// Children go to the install that drives their parent: they carry its class.
func TestChildrenInheritTheParentsClass(t *testing.T) {
	p := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "lead", Namespace: "team", UID: "p-uid",
		Labels: map[string]string{agentsv1.LabelClass: "staging"}}}
	c := (&childSpawner{parent: p}).child(tool.SpawnRequest{Task: "t"}, agentsv1.Limits{}, agentsv1.ToolsSpec{}, childName(p.Name, 1))
	if c.Labels[agentsv1.LabelClass] != "staging" || c.Labels[agentsv1.LabelParentUID] != "p-uid" {
		t.Errorf("child labels %v", c.Labels)
	}
	p.Labels = nil
	c = (&childSpawner{parent: p}).child(tool.SpawnRequest{Task: "t"}, agentsv1.Limits{}, agentsv1.ToolsSpec{}, childName(p.Name, 1))
	if _, ok := c.Labels[agentsv1.LabelClass]; ok {
		t.Errorf("a default-class parent's child has a class: %v", c.Labels)
	}
}

// Children carry their tree's root: the parent when it is top-level, else
// the parent's own root, so sharded replicas keep a tree on one replica.
func TestChildrenCarryTheirTreesRoot(t *testing.T) {
	tests := []struct {
		name         string
		parentLabels map[string]string
		want         string
	}{
		{"top-level parent", nil, "p-uid"},
		{"parent that is a child itself", map[string]string{agentsv1.LabelRootUID: "root-uid"}, "root-uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "lead", Namespace: "team", UID: "p-uid", Labels: tt.parentLabels}}
			c := (&childSpawner{parent: p}).child(tool.SpawnRequest{Task: "t"}, agentsv1.Limits{}, agentsv1.ToolsSpec{}, childName(p.Name, 1))
			if got := c.Labels[agentsv1.LabelRootUID]; got != tt.want {
				t.Errorf("root label %q, want %q", got, tt.want)
			}
		})
	}
}

// mcpParentTools is a parent session's spec.tools with three MCP servers and
// other tool settings a child must keep.
func mcpParentTools() agentsv1.ToolsSpec {
	return agentsv1.ToolsSpec{
		DisabledTools: []string{"shell"},
		Policy:        &agentsv1.ToolPolicy{DefaultAction: agentsv1.PolicyAllow},
		MCPServers: []agentsv1.MCPServer{
			{Name: "tracker", URL: "https://tracker.example/mcp", AllowedTools: []string{"get_*"},
				HeadersSecretRef: &agentsv1.MCPHeadersSecretRef{Name: "tracker-mcp"}},
			{Name: "files", Command: []string{"mcpserver", "-stdio"}, DeniedTools: []string{"write_*"}},
			{Name: "docs", URL: "https://docs.example/mcp"},
		},
	}
}

// mcpNames are the names of a spec.tools' MCP servers.
func mcpNames(tools agentsv1.ToolsSpec) []string {
	names := []string{}
	for _, s := range tools.MCPServers {
		names = append(names, s.Name)
	}
	return names
}

// A child inherits every MCP server of its parent unless the spawn names
// some; then it gets only those, each exactly as the parent has it (its
// allowed and denied tools too), and a name the parent lacks is an error.
func TestChildToolsOnlyNarrow(t *testing.T) {
	cases := []struct {
		name    string
		parent  agentsv1.ToolsSpec
		servers []string
		want    []string
		wantErr string
	}{
		{name: "absent inherits all", parent: mcpParentTools(), servers: nil, want: []string{"tracker", "files", "docs"}},
		{name: "a subset, in the parent's order", parent: mcpParentTools(), servers: []string{"docs", "tracker"}, want: []string{"tracker", "docs"}},
		{name: "a name twice is one server", parent: mcpParentTools(), servers: []string{"files", "files"}, want: []string{"files"}},
		{name: "empty is none", parent: mcpParentTools(), servers: []string{}, want: []string{}},
		{name: "a server the parent lacks", parent: mcpParentTools(), servers: []string{"docs", "payroll"},
			wantErr: `MCP server "payroll" is not one of this session's; a subagent can only get servers this session has: tracker, files, docs`},
		{name: "a parent without servers", parent: agentsv1.ToolsSpec{}, servers: []string{"docs"},
			wantErr: `MCP server "docs" is not one of this session's: it has no MCP servers`},
		{name: "a parent without servers, none asked", parent: agentsv1.ToolsSpec{}, servers: []string{}, want: []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "lead", Namespace: "team", UID: "p-uid"},
				Spec: agentsv1.AgentSessionSpec{Tools: tc.parent}}
			before := p.DeepCopy()
			sp := &childSpawner{parent: p}
			req := tool.SpawnRequest{Task: "t", MCPServers: tc.servers}
			got, err := sp.childTools(req)
			if !equality.Semantic.DeepEqual(p, before) {
				t.Errorf("childTools changed the parent: %+v", p.Spec.Tools)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names := mcpNames(got); !slices.Equal(names, tc.want) {
				t.Errorf("servers = %v, want %v", names, tc.want)
			}
			for _, s := range got.MCPServers {
				i := slices.IndexFunc(tc.parent.MCPServers, func(ps agentsv1.MCPServer) bool { return ps.Name == s.Name })
				if !equality.Semantic.DeepEqual(s, tc.parent.MCPServers[i]) {
					t.Errorf("server %s = %+v, want the parent's %+v", s.Name, s, tc.parent.MCPServers[i])
				}
			}
			rest, parentRest := got.DeepCopy(), tc.parent.DeepCopy()
			rest.MCPServers, parentRest.MCPServers = nil, nil
			if !equality.Semantic.DeepEqual(rest, parentRest) {
				t.Errorf("the other tool settings = %+v, want the parent's %+v", rest, parentRest)
			}
			if c := sp.child(req, agentsv1.Limits{}, got, childName(p.Name, 1)); !slices.Equal(mcpNames(c.Spec.Tools), tc.want) {
				t.Errorf("child servers = %v, want %v", mcpNames(c.Spec.Tools), tc.want)
			}
		})
	}
}

// Against the API server: the child stored is the narrowed one, an unknown
// server creates nothing, a spawn_agent call run again after a crash adopts
// its narrowed child and never widens it (even when the retry would inherit
// everything), and a narrowed child cannot hand its own child a server it
// was not given.
func TestSpawnNarrowsMCPServers(t *testing.T) {
	f := newSpawnerFixture(t)
	ctx := t.Context()
	watch := f.watch(t)
	parent := f.session(t, "mcp-lead", func(s *agentsv1.AgentSession) {
		s.Spec.Tools = mcpParentTools()
		s.Spec.Subagents.MaxDepth = ptr.To[int32](2)
	})
	sp := &childSpawner{c: f.cached, r: f.api, parent: parent, watch: watch}
	stored := func(t *testing.T, name string) *agentsv1.AgentSession {
		t.Helper()
		c := &agentsv1.AgentSession{}
		if err := f.api.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	children := func(t *testing.T, p *agentsv1.AgentSession) []agentsv1.AgentSession {
		t.Helper()
		var l agentsv1.AgentSessionList
		if err := f.api.List(ctx, &l, client.InNamespace("default"), client.MatchingLabels{agentsv1.LabelParentUID: string(p.UID)}); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}

	ids := map[string]string{}
	for _, tc := range []struct {
		call    string
		servers []string
		want    []string
	}{
		{"toolu_all", nil, []string{"tracker", "files", "docs"}},
		{"toolu_docs", []string{"docs"}, []string{"docs"}},
		{"toolu_none", []string{}, []string{}},
	} {
		t.Run(tc.call, func(t *testing.T) {
			res, err := sp.Spawn(ctx, tool.SpawnRequest{CallID: tc.call, Task: "t", MCPServers: tc.servers})
			if err != nil {
				t.Fatal(err)
			}
			ids[tc.call] = res.AgentID
			c := stored(t, res.AgentID)
			if names := mcpNames(c.Spec.Tools); !slices.Equal(names, tc.want) {
				t.Errorf("stored child's servers = %v, want %v", names, tc.want)
			}
			if !equality.Semantic.DeepEqual(c.Spec.Tools.Policy, parent.Spec.Tools.Policy) || !slices.Equal(c.Spec.Tools.DisabledTools, []string{"shell"}) {
				t.Errorf("stored child's tools = %+v, want the parent's other settings", c.Spec.Tools)
			}
		})
	}

	t.Run("an unknown server is an error and creates nothing", func(t *testing.T) {
		before := len(children(t, parent))
		_, err := sp.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_bad", Task: "t", MCPServers: []string{"docs", "payroll"}})
		if err == nil || !strings.Contains(err.Error(), `MCP server "payroll" is not one of this session's`) {
			t.Errorf("spawn = %v, want the unknown-server error", err)
		}
		if n := len(children(t, parent)); n != before {
			t.Errorf("%d children after the error, want %d", n, before)
		}
	})

	t.Run("a call run again after a crash keeps its narrowed child", func(t *testing.T) {
		again := &childSpawner{c: f.cached, r: f.api, parent: parent, watch: watch}
		for _, retry := range [][]string{nil, {"tracker", "files", "docs"}} {
			res, err := again.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_docs", Task: "t", MCPServers: retry})
			if err != nil || res.AgentID != ids["toolu_docs"] {
				t.Fatalf("retry = %+v, %v; want %s adopted", res, err, ids["toolu_docs"])
			}
		}
		if names := mcpNames(stored(t, ids["toolu_docs"]).Spec.Tools); !slices.Equal(names, []string{"docs"}) {
			t.Errorf("adopted child's servers = %v, want [docs]", names)
		}
		if n := len(children(t, parent)); n != 3 {
			t.Errorf("%d children, want 3", n)
		}
	})

	t.Run("a narrowed child's own child gets no more than it has", func(t *testing.T) {
		child := stored(t, ids["toolu_docs"])
		deep := &childSpawner{c: f.cached, r: f.api, parent: child, watch: watch}
		_, err := deep.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_gc_bad", Task: "t", MCPServers: []string{"tracker"}})
		if err == nil || !strings.Contains(err.Error(), "a subagent can only get servers this session has: docs") {
			t.Errorf("spawn = %v, want the unknown-server error", err)
		}
		res, err := deep.Spawn(ctx, tool.SpawnRequest{CallID: "toolu_gc", Task: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if names := mcpNames(stored(t, res.AgentID).Spec.Tools); !slices.Equal(names, []string{"docs"}) {
			t.Errorf("grandchild's servers = %v, want [docs]", names)
		}
	})
}
