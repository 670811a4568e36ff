package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// DefaultMaxChildren bounds the live children of a session when
// spec.subagents.maxChildren is unset.
const DefaultMaxChildren = 4

// childPoll is how often Wait looks at a child's status.
const childPoll = 500 * time.Millisecond

// childSpawner implements tool.SubagentSpawner by creating child AgentSessions
// (controller ownerReference and parentRef to the parent, depth + 1, same
// namespace). A shared child runs in its parent's workspace pod.
type childSpawner struct {
	c      client.Client // creates and updates children
	r      client.Reader // reads them uncached: a child is read right after its creation
	parent *agentsv1.AgentSession
}

var _ tool.SubagentSpawner = (*childSpawner)(nil)

// childName is the deterministic name of the n-th child of parent.
func childName(parent string, n int) string {
	if len(parent) > 48 {
		parent = parent[:48]
	}
	return parent + "-sub-" + strconv.Itoa(n)
}

// Spawn creates the next child, unless maxChildren children are still running.
func (sp *childSpawner) Spawn(ctx context.Context, req tool.SpawnRequest) (tool.SpawnResult, error) {
	p := sp.parent
	var children agentsv1.AgentSessionList
	if err := sp.r.List(ctx, &children, client.InNamespace(p.Namespace),
		client.MatchingLabels{agentsv1.LabelParentUID: string(p.UID)}); err != nil {
		return tool.SpawnResult{}, fmt.Errorf("list children: %w", err)
	}
	limit := int32(DefaultMaxChildren)
	if m := p.Spec.Subagents.MaxChildren; m != nil {
		limit = *m
	}
	live := int32(0)
	for _, c := range children.Items {
		if !c.Status.Phase.IsFinal() {
			live++
		}
	}
	if live >= limit {
		return tool.SpawnResult{}, fmt.Errorf("%d subagents are still running and spec.subagents.maxChildren is %d: wait for or close one first", live, limit)
	}
	for n := len(children.Items) + 1; ; n++ {
		child := sp.child(req, childName(p.Name, n))
		err := sp.c.Create(ctx, child)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return tool.SpawnResult{}, fmt.Errorf("create child session: %w", err)
		}
		return tool.SpawnResult{AgentID: child.Name, Status: "running"}, nil
	}
}

func (sp *childSpawner) child(req tool.SpawnRequest, name string) *agentsv1.AgentSession {
	p := sp.parent
	depth := int32(1)
	if p.Spec.Depth != nil {
		depth = *p.Spec.Depth + 1
	}
	spec := agentsv1.AgentSessionSpec{
		Prompt:       req.Task,
		Model:        *p.Spec.Model.DeepCopy(),
		Instructions: p.Spec.Instructions,
		Limits:       *p.Spec.Limits.DeepCopy(),
		Tools:        *p.Spec.Tools.DeepCopy(),
		Workspace:    *p.Spec.Workspace.DeepCopy(),
		Subagents:    *p.Spec.Subagents.DeepCopy(),
		ParentRef:    &agentsv1.ParentReference{Name: p.Name, UID: string(p.UID)},
		Depth:        &depth,
	}
	if req.Model != "" {
		spec.Model.Name = req.Model
	}
	if req.MaxTurns > 0 {
		spec.Limits.MaxTurns = int32(req.MaxTurns)
	}
	spec.Subagents.WorkingDir = req.WorkingDir
	annotations := map[string]string{}
	if p.Spec.Subagents.Workspace != agentsv1.SubagentWorkspaceIsolated {
		annotations[agentsv1.AnnotationSharedWorkspace] = p.Name
	}
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: p.Namespace,
			Labels: map[string]string{
				agentsv1.LabelParent:    p.Name,
				agentsv1.LabelParentUID: string(p.UID),
			},
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(p, agentsv1.GroupVersion.WithKind("AgentSession")),
			},
		},
		Spec: spec,
	}
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

// Wait polls the child until it has finished its current input.
func (sp *childSpawner) Wait(ctx context.Context, agentID string) (tool.SubAgentResult, error) {
	t := time.NewTicker(childPoll)
	defer t.Stop()
	for {
		c, err := sp.get(ctx, agentID)
		if err != nil {
			return tool.SubAgentResult{}, err
		}
		switch c.Status.Phase {
		case agentsv1.PhaseSucceeded, agentsv1.PhaseAwaitingInput:
			return tool.SubAgentResult{Output: c.Status.Result, Success: true, TurnsUsed: int(c.Status.Turns)}, nil
		case agentsv1.PhaseFailed, agentsv1.PhaseAborted:
			out := c.Status.Error
			if out == "" {
				out = c.Status.Result
			}
			return tool.SubAgentResult{Output: out, Success: false, TurnsUsed: int(c.Status.Turns)}, nil
		}
		select {
		case <-ctx.Done():
			return tool.SubAgentResult{}, ctx.Err()
		case <-t.C:
		}
	}
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
