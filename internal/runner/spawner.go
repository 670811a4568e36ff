package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/budget"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// DefaultMaxChildren bounds the live children of a session when
// spec.subagents.maxChildren is unset.
const DefaultMaxChildren = 4

// childSpawner implements tool.SubagentSpawner by creating child AgentSessions
// (controller ownerReference and parentRef to the parent, depth + 1, same
// namespace). A shared child runs in its parent's workspace pod.
//
// Children are read from the manager's informer cache through c, so a parent
// waiting on many children costs the API server nothing; r (uncached) is used
// only for read-modify-write updates and to tell a missing child from a cache
// that has not seen it yet.
type childSpawner struct {
	c      client.Client // creates and updates children; its reads come from the informer cache
	r      client.Reader // uncached reads
	parent *agentsv1.AgentSession
	// watch wakes Wait on watch events of children.
	watch *childWatch

	// budgets is the runner's ledger: a child gets at most what the tree
	// has left. worked is the parent's working time so far.
	budgets *budget.Ledger
	worked  func() time.Duration

	mu      sync.Mutex      // serialises Spawn, so parallel spawn_agent calls respect maxChildren
	spawned map[string]bool // children created here; the cache may not have them yet
	// calls maps the spawn_agent call IDs of the parent's children to the
	// children's names: listed from the API server at this spawner's first
	// spawn (adopt), then kept up to date with the children created here;
	// nil until then.
	calls map[string]string
}

var _ tool.SubagentSpawner = (*childSpawner)(nil)

// childName is the deterministic name of the n-th child of parent.
func childName(parent string, n int) string {
	if len(parent) > 48 {
		parent = parent[:48]
	}
	return parent + "-sub-" + strconv.Itoa(n)
}

// Spawn creates the child of the call (adopting it when an earlier run of
// the same call created it), unless the depth limit is reached or
// maxChildren children are still running.
func (sp *childSpawner) Spawn(ctx context.Context, req tool.SpawnRequest) (tool.SpawnResult, error) {
	p := sp.parent
	if depth, limit := sessionDepth(p), maxDepth(p); depth >= limit {
		return tool.SpawnResult{}, fmt.Errorf("this session is at depth %d and spec.subagents.maxDepth is %d: it may not spawn subagents", depth, limit)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if req.CallID != "" {
		if res, ok, err := sp.adopt(ctx, req.CallID); ok || err != nil {
			return res, err
		}
	}
	limits, err := sp.childLimits(req)
	if err != nil {
		return tool.SpawnResult{}, err
	}
	tools, err := sp.childTools(req)
	if err != nil {
		return tool.SpawnResult{}, err
	}
	var children agentsv1.AgentSessionList
	// Only read: the cache's own objects, not a copy of each (a wide
	// fan-out lists hundreds of children per spawn).
	if err := sp.c.List(ctx, &children, client.InNamespace(p.Namespace),
		client.MatchingLabels{agentsv1.LabelParentUID: string(p.UID)}, client.UnsafeDisableDeepCopy); err != nil {
		return tool.SpawnResult{}, fmt.Errorf("list children: %w", err)
	}
	limit := int32(DefaultMaxChildren)
	if m := p.Spec.Subagents.MaxChildren; m != nil {
		limit = *m
	}
	live, known := int32(0), map[string]bool{}
	for _, c := range children.Items {
		known[c.Name] = true
		if !c.Status.Phase.IsFinal() {
			live++
		}
	}
	for name := range sp.spawned {
		if !known[name] { // created, not in the cache yet: it has not ended
			known[name] = true
			live++
		}
	}
	if live >= limit {
		return tool.SpawnResult{}, fmt.Errorf("%d subagents are still running and spec.subagents.maxChildren is %d: wait for or close one first", live, limit)
	}
	for n := len(known) + 1; ; n++ {
		child := sp.child(req, limits, tools, childName(p.Name, n))
		err := sp.c.Create(ctx, child)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return tool.SpawnResult{}, fmt.Errorf("create child session: %w", err)
		}
		if sp.spawned == nil {
			sp.spawned = map[string]bool{}
		}
		sp.spawned[child.Name] = true
		if req.CallID != "" {
			sp.calls[req.CallID] = child.Name // adopt made calls
		}
		return tool.SpawnResult{AgentID: child.Name, Status: "running"}, nil
	}
}

// adopt returns the child that an earlier run of the spawn_agent call
// callID created (its AnnotationSpawnCall), if there is one. The children
// are listed from the API server, not the cache, once per spawner (the
// runner's life): a child may have been created just before a crash. Every
// child created later is created here and noted in calls, so a wide
// fan-out lists once instead of once per spawn. A known child is read again
// (uncached) for its phase; one deleted since is not adopted.
func (sp *childSpawner) adopt(ctx context.Context, callID string) (tool.SpawnResult, bool, error) {
	if sp.calls == nil {
		var children agentsv1.AgentSessionList
		if err := sp.r.List(ctx, &children, client.InNamespace(sp.parent.Namespace),
			client.MatchingLabels{agentsv1.LabelParentUID: string(sp.parent.UID)}); err != nil {
			return tool.SpawnResult{}, false, fmt.Errorf("list children: %w", err)
		}
		sp.calls = make(map[string]string, len(children.Items))
		for _, c := range children.Items {
			if id := c.Annotations[agentsv1.AnnotationSpawnCall]; id != "" {
				sp.calls[id] = c.Name
			}
		}
	}
	name, ok := sp.calls[callID]
	if !ok {
		return tool.SpawnResult{}, false, nil
	}
	var c agentsv1.AgentSession
	if err := sp.r.Get(ctx, types.NamespacedName{Namespace: sp.parent.Namespace, Name: name}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			delete(sp.calls, callID)
			return tool.SpawnResult{}, false, nil
		}
		return tool.SpawnResult{}, false, fmt.Errorf("read child %s: %w", name, err)
	}
	if c.Annotations[agentsv1.AnnotationSpawnCall] != callID || c.Labels[agentsv1.LabelParentUID] != string(sp.parent.UID) {
		// Deleted and made again by someone else under the same name.
		delete(sp.calls, callID)
		return tool.SpawnResult{}, false, nil
	}
	if sp.spawned == nil {
		sp.spawned = map[string]bool{}
	}
	sp.spawned[c.Name] = true
	status := "running"
	switch c.Status.Phase {
	case agentsv1.PhaseSucceeded:
		status = "completed"
	case agentsv1.PhaseFailed, agentsv1.PhaseAborted:
		status = "failed"
	}
	return tool.SpawnResult{AgentID: c.Name, Status: status}, true, nil
}

// sessionDepth is spec.depth (0 when unset).
func sessionDepth(s *agentsv1.AgentSession) int32 {
	if s.Spec.Depth == nil {
		return 0
	}
	return *s.Spec.Depth
}

// maxDepth is spec.subagents.maxDepth (default 1).
func maxDepth(s *agentsv1.AgentSession) int32 {
	if m := s.Spec.Subagents.MaxDepth; m != nil {
		return *m
	}
	return loop.DefaultMaxSubagentDepth
}

// childLimits are the parent's limits narrowed for a child: its budgets
// are what the tree has left, its deadline the parent's remaining working
// time, its max_turns at most the parent's; the model must be the parent's
// or one spec.subagents.models allows. A spawn can only narrow.
func (sp *childSpawner) childLimits(req tool.SpawnRequest) (agentsv1.Limits, error) {
	p := sp.parent
	lim := *p.Spec.Limits.DeepCopy()
	if req.Model != "" && req.Model != p.Spec.Model.Name && !slices.Contains(p.Spec.Subagents.Models, req.Model) {
		allowed := append([]string{p.Spec.Model.Name}, p.Spec.Subagents.Models...)
		return lim, fmt.Errorf("model %q is not allowed for subagents; allowed: %s (spec.subagents.models)", req.Model, strings.Join(allowed, ", "))
	}
	if req.MaxTurns > 0 && (lim.MaxTurns == 0 || int32(req.MaxTurns) < lim.MaxTurns) {
		lim.MaxTurns = int32(req.MaxTurns)
	}
	if sp.budgets != nil {
		left, ok := sp.budgets.Remaining(ledgerID(p.Namespace, p.Name))
		if !ok {
			return lim, errors.New("the session's budget is used up: no subagent can be spawned")
		}
		lim.TokenBudget = left.Tokens
		lim.CostBudget = ""
		if left.Cost > 0 {
			micro := max(left.Cost/1000*1000, 1000) // a decimal of six places, never rounded up
			lim.CostBudget = strings.TrimRight(strings.TrimRight(micro.String(), "0"), ".")
		}
	}
	if d := lim.Deadline; d != nil && sp.worked != nil {
		left := d.Duration - sp.worked()
		if left <= 0 {
			return lim, errors.New("the session's deadline (spec.limits.deadline) is used up: no subagent can be spawned")
		}
		lim.Deadline = &metav1.Duration{Duration: max(left.Truncate(time.Second), time.Second)}
	}
	return lim, nil
}

// childTools are the parent's spec.tools for a child: its MCP servers are
// all of the parent's unless the spawn names some (req.MCPServers non-nil,
// empty for none), and then only those, each exactly as the parent has it
// (URL or command, headers Secret, allowed and denied tools). A name the
// parent does not have is an error: a spawn can only narrow.
func (sp *childSpawner) childTools(req tool.SpawnRequest) (agentsv1.ToolsSpec, error) {
	tools := *sp.parent.Spec.Tools.DeepCopy()
	if req.MCPServers == nil {
		return tools, nil
	}
	have := make([]string, 0, len(tools.MCPServers))
	for _, s := range tools.MCPServers {
		have = append(have, s.Name)
	}
	for _, name := range req.MCPServers {
		if slices.Contains(have, name) {
			continue
		}
		if len(have) == 0 {
			return tools, fmt.Errorf("MCP server %q is not one of this session's: it has no MCP servers (pass mcp_servers: [] or leave it out)", name)
		}
		return tools, fmt.Errorf("MCP server %q is not one of this session's; a subagent can only get servers this session has: %s", name, strings.Join(have, ", "))
	}
	var keep []agentsv1.MCPServer
	for _, s := range tools.MCPServers {
		if slices.Contains(req.MCPServers, s.Name) {
			keep = append(keep, s)
		}
	}
	tools.MCPServers = keep
	return tools, nil
}

// child is the AgentSession of a spawn: limits and tools come from
// childLimits and childTools.
func (sp *childSpawner) child(req tool.SpawnRequest, limits agentsv1.Limits, tools agentsv1.ToolsSpec, name string) *agentsv1.AgentSession {
	p := sp.parent
	depth := sessionDepth(p) + 1
	spec := agentsv1.AgentSessionSpec{
		Prompt:       req.Task,
		Model:        *p.Spec.Model.DeepCopy(),
		Instructions: p.Spec.Instructions,
		Limits:       limits,
		Tools:        tools,
		Workspace:    *p.Spec.Workspace.DeepCopy(),
		Subagents:    *p.Spec.Subagents.DeepCopy(),
		ParentRef:    &agentsv1.ParentReference{Name: p.Name, UID: string(p.UID)},
		Depth:        &depth,
	}
	if req.Model != "" {
		spec.Model.Name = req.Model
	}
	spec.Subagents.WorkingDir = req.WorkingDir
	annotations := map[string]string{}
	if req.CallID != "" {
		annotations[agentsv1.AnnotationSpawnCall] = req.CallID
	}
	if p.Spec.Subagents.Workspace != agentsv1.SubagentWorkspaceIsolated {
		annotations[agentsv1.AnnotationSharedWorkspace] = p.Name
	}
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   p.Namespace,
			Labels:      childLabels(p),
			Annotations: annotations,
			// The controller's finalizer from the start: the controller
			// would add it in a write of its own (one per child of a fan-out).
			Finalizers: []string{agentsv1.Finalizer},
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(p, agentsv1.GroupVersion.WithKind("AgentSession")),
			},
		},
		Spec: spec,
	}
}

// childLabels are the labels of p's children: their parent, their tree's
// root (p's root, or p when it is top-level: sharded replicas keep a tree
// on one replica), and p's class, so the install that drives p drives them
// too.
func childLabels(p *agentsv1.AgentSession) map[string]string {
	root := p.Labels[agentsv1.LabelRootUID]
	if root == "" {
		root = string(p.UID)
	}
	l := map[string]string{agentsv1.LabelParent: p.Name, agentsv1.LabelParentUID: string(p.UID), agentsv1.LabelRootUID: root}
	if c, ok := p.Labels[agentsv1.LabelClass]; ok {
		l[agentsv1.LabelClass] = c
	}
	return l
}

// SendInput appends a message to the child: steering while it runs, a
// follow-up otherwise.
func (sp *childSpawner) SendInput(ctx context.Context, agentID, message string) error {
	return sp.update(ctx, agentID, func(c *agentsv1.AgentSession) error {
		if c.Status.Phase == agentsv1.PhaseFailed || c.Status.Phase == agentsv1.PhaseAborted {
			return fmt.Errorf("agent %s has ended (%s)", agentID, c.Status.Phase)
		}
		kind := agentsv1.MessageFollowUp
		if c.Status.Phase == agentsv1.PhaseRunning {
			kind = agentsv1.MessageSteer
		}
		c.Spec.Messages = append(c.Spec.Messages, agentsv1.Message{
			Name: "input-" + strconv.Itoa(len(c.Spec.Messages)+1), Kind: kind, Text: message,
		})
		return nil
	})
}

// Wait blocks until the child has finished its current input. It reads the
// child from the informer cache only, again on each watch event for it.
func (sp *childSpawner) Wait(ctx context.Context, agentID string) (tool.SubAgentResult, error) {
	wake, cancel := sp.watch.subscribe(types.NamespacedName{Namespace: sp.parent.Namespace, Name: agentID})
	defer cancel() // subscribed before the first read: no event is missed
	seen, confirmed := false, false
	for {
		c, err := sp.cached(ctx, agentID)
		switch {
		case err == nil:
			seen = true
			if res, done := waitResult(c); done {
				return res, nil
			}
		case !errors.Is(err, errNotCached):
			return tool.SubAgentResult{}, err
		case seen:
			return tool.SubAgentResult{}, fmt.Errorf("agent %q was deleted", agentID)
		case sp.created(agentID):
			// Created here and not in the cache yet: its watch event is on the way.
		case !confirmed:
			// Ask the API server once whether it exists at all.
			confirmed = true
			if _, err := sp.get(ctx, agentID); err != nil {
				return tool.SubAgentResult{}, err
			}
		}
		select {
		case <-ctx.Done():
			return tool.SubAgentResult{}, ctx.Err()
		case <-wake:
		}
	}
}

// waitResult is the result of a child that finished its input.
func waitResult(c *agentsv1.AgentSession) (tool.SubAgentResult, bool) {
	switch c.Status.Phase {
	case agentsv1.PhaseSucceeded, agentsv1.PhaseAwaitingInput:
		return tool.SubAgentResult{Output: c.Status.Result, Success: true, TurnsUsed: int(c.Status.Turns)}, true
	case agentsv1.PhaseFailed, agentsv1.PhaseAborted:
		out := c.Status.Error
		if out == "" {
			out = c.Status.Result
		}
		return tool.SubAgentResult{Output: out, Success: false, TurnsUsed: int(c.Status.Turns)}, true
	}
	return tool.SubAgentResult{}, false
}

// Close aborts the child and returns its phase.
func (sp *childSpawner) Close(ctx context.Context, agentID string) (string, error) {
	var phase agentsv1.Phase
	err := sp.update(ctx, agentID, func(c *agentsv1.AgentSession) error {
		phase = c.Status.Phase
		if phase.IsFinal() {
			return errNoChange
		}
		c.Spec.Abort = true
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return "", err
	}
	if phase == "" || !phase.IsFinal() {
		return "aborted", nil
	}
	return string(phase), nil
}

var errNoChange = errors.New("no change")

// errNotCached is returned by cached for a child the cache does not hold.
var errNotCached = errors.New("not in the cache")

// cached reads a child of this session from the informer cache; errNotCached
// means the cache does not hold it.
func (sp *childSpawner) cached(ctx context.Context, agentID string) (*agentsv1.AgentSession, error) {
	c := &agentsv1.AgentSession{}
	err := sp.c.Get(ctx, types.NamespacedName{Namespace: sp.parent.Namespace, Name: agentID}, c)
	if apierrors.IsNotFound(err) {
		return nil, errNotCached
	}
	if err != nil {
		return nil, fmt.Errorf("get agent %s: %w", agentID, err)
	}
	if c.Labels[agentsv1.LabelParentUID] != string(sp.parent.UID) {
		return nil, fmt.Errorf("agent %q is not a subagent of this session", agentID)
	}
	return c, nil
}

// created reports whether this spawner created the child agentID.
func (sp *childSpawner) created(agentID string) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.spawned[agentID]
}

// get reads a child of this session from the API server.
func (sp *childSpawner) get(ctx context.Context, agentID string) (*agentsv1.AgentSession, error) {
	c := &agentsv1.AgentSession{}
	if err := sp.r.Get(ctx, types.NamespacedName{Namespace: sp.parent.Namespace, Name: agentID}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no agent %q", agentID)
		}
		return nil, fmt.Errorf("get agent %s: %w", agentID, err)
	}
	if c.Labels[agentsv1.LabelParentUID] != string(sp.parent.UID) {
		return nil, fmt.Errorf("agent %q is not a subagent of this session", agentID)
	}
	return c, nil
}

// update applies fn to the latest child and retries on conflicts.
func (sp *childSpawner) update(ctx context.Context, agentID string, fn func(*agentsv1.AgentSession) error) error {
	for {
		c, err := sp.get(ctx, agentID)
		if err != nil {
			return err
		}
		if err := fn(c); err != nil {
			return err
		}
		err = sp.c.Update(ctx, c)
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("update agent %s: %w", agentID, err)
			}
			return nil
		}
	}
}

// AbortChildren sets spec.abort on every child of parent that has not ended,
// reading them from c's cache. Each child's own reconcile then aborts its
// children, so calling it when a parent is aborted, fails or is deleted stops
// the whole tree.
func AbortChildren(ctx context.Context, c client.Client, parent *agentsv1.AgentSession) error {
	var children agentsv1.AgentSessionList
	if err := c.List(ctx, &children, client.InNamespace(parent.Namespace),
		client.MatchingLabels{agentsv1.LabelParentUID: string(parent.UID)}); err != nil {
		return fmt.Errorf("list children: %w", err)
	}
	abort := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"abort":true}}`))
	var errs []error
	for i := range children.Items {
		ch := &children.Items[i]
		if ch.Spec.Abort || ch.Status.Phase.IsFinal() || !ch.DeletionTimestamp.IsZero() {
			continue
		}
		if err := c.Patch(ctx, ch, abort); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("abort child %s: %w", ch.Name, err))
		}
	}
	return errors.Join(errs...)
}

// childWatch fans the watch events of AgentSessions out to the Waits
// subscribed to them, through one handler on the manager's shared informer:
// a parent waiting on a hundred children costs no API request and no timer.
type childWatch struct {
	mu   sync.Mutex
	subs map[types.NamespacedName]map[chan struct{}]struct{}
}

// newChildWatch registers the handler on the AgentSession informer of inf
// (the manager's cache). It does not wait for the cache to sync, so it may
// be called before the manager starts.
func newChildWatch(ctx context.Context, inf cache.Informers) (*childWatch, error) {
	informer, err := inf.GetInformer(ctx, &agentsv1.AgentSession{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("get agentsession informer: %w", err)
	}
	w := &childWatch{subs: map[types.NamespacedName]map[chan struct{}]struct{}{}}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.notify,
		UpdateFunc: func(_, obj any) { w.notify(obj) },
		DeleteFunc: w.notify,
	}); err != nil {
		return nil, fmt.Errorf("watch agentsessions: %w", err)
	}
	return w, nil
}

// subscribe returns a channel that receives a value (coalesced) after each
// event of key, and a function that ends the subscription.
func (w *childWatch) subscribe(key types.NamespacedName) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.subs[key] == nil {
		w.subs[key] = map[chan struct{}]struct{}{}
	}
	w.subs[key][ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.subs[key], ch)
		if len(w.subs[key]) == 0 {
			delete(w.subs, key)
		}
		w.mu.Unlock()
	}
}

func (w *childWatch) notify(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs[key] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
