package agentsession

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// Quota: a namespace runs at most a given number of top-level sessions at
// once (the manager's --max-sessions-per-namespace, or the namespace's
// agent-operator.dev/max-sessions annotation; the smaller when both are set).
// A session over the limit creates no pod and stays Pending with reason
// QuotaExceeded; it is looked at again every quotaPoll and starts, in
// creation order, when a slot frees. A slot is held from the moment a
// session's pod is created until the session is Succeeded, Failed or Aborted
// (a Succeeded session that receives a follow-up message runs again in its
// kept pod without asking). Every session counts, children included. A
// child the manager spawned (its controller ownerReference is the parent its
// parentRef names, see runner.OwnedByParent) is never held back: holding it
// could deadlock a parent waiting for it, and it is bounded by its parent's
// subagents.maxChildren and maxDepth. A session that only claims a parent
// (a parentRef written by hand) is held like any top-level session.

// quotaPoll is how often a session held by the quota looks for a free slot.
const quotaPoll = 5 * time.Second

// quotaHold returns why s must wait for a slot, or "" when it may start.
func (r *Reconciler) quotaHold(ctx context.Context, s *agentsv1.AgentSession) (string, error) {
	if runner.OwnedByParent(s) {
		return "", nil
	}
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: s.Namespace}, ns); err != nil {
		return "", fmt.Errorf("get namespace for its session quota: %w", err)
	}
	limit, source, bad := sessionLimit(r.MaxSessionsPerNamespace, ns.Annotations[agentsv1.AnnotationMaxSessions])
	if bad != "" {
		ctrl.LoggerFrom(ctx).Info("Ignoring an invalid session quota annotation", "annotation", agentsv1.AnnotationMaxSessions, "value", bad)
	}
	if limit == 0 {
		return "", nil
	}
	var list agentsv1.AgentSessionList
	// Read only: the cache's objects themselves, not a deep copy of every
	// session of the namespace per held session and poll.
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("list sessions for the quota: %w", err)
	}
	n := sessionsAhead(s, list.Items)
	if n < limit {
		return "", nil
	}
	return fmt.Sprintf("namespace %s allows %d concurrent sessions (%s) and %d are running or queued before this one; "+
		"the session starts when one of them finishes", s.Namespace, limit, source, n), nil
}

// sessionLimit combines the manager flag and the namespace annotation: 0 is
// unlimited, and when both are set the smaller wins. An annotation that is
// not a positive integer is ignored and returned as bad.
func sessionLimit(flag int, annotation string) (limit int, source, bad string) {
	if flag > 0 {
		limit, source = flag, "--max-sessions-per-namespace"
	}
	if annotation == "" {
		return limit, source, ""
	}
	v, err := strconv.Atoi(strings.TrimSpace(annotation))
	if err != nil || v < 1 {
		return limit, source, annotation
	}
	if limit == 0 || v < limit {
		limit, source = v, "namespace annotation "+agentsv1.AnnotationMaxSessions
	}
	return limit, source, ""
}

// sessionsAhead counts the sessions of the namespace (children too) that
// hold a slot or queue before s: not final, not being deleted or aborted, and
// either started (a pod was created) or created before s. Counting the older
// Pending ones keeps the order fair and makes a stale cache err on the side
// of waiting.
func sessionsAhead(s *agentsv1.AgentSession, all []agentsv1.AgentSession) int {
	n := 0
	for i := range all {
		o := &all[i]
		if o.UID == s.UID || o.DeletionTimestamp != nil || o.Spec.Abort || o.Status.Phase.IsFinal() {
			continue
		}
		if holdsSlot(o) || createdBefore(o, s) {
			n++
		}
	}
	return n
}

// holdsSlot reports whether o got past the quota (its pod was created).
func holdsSlot(o *agentsv1.AgentSession) bool {
	switch o.Status.Phase {
	case agentsv1.PhaseProvisioning, agentsv1.PhaseRunning, agentsv1.PhaseAwaitingInput:
		return true
	}
	return o.Status.PodName != ""
}

func createdBefore(a, b *agentsv1.AgentSession) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
}
