package agentsession

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// wake is when a child's change reaches its parent's reconcile.
type wake int

const (
	// wakeNever: nothing the parent's status shows changed.
	wakeNever wake = iota
	// wakeLater: the child was created, changed phase without ending or
	// starting again, or only its tree figures changed; the parent looks
	// within one status interval, on its coalesced schedule.
	wakeLater
	// wakeNow: the child was deleted, ended, or started again after its end.
	wakeNow
)

// childUpdateWake says when an update of a child from old to new wakes its
// parent: at once when the child ended or started again after its end (the
// parent's own decisions, such as stopping or releasing a shared pod, wait
// for its live children, and only these changes make a child live or not),
// later when it changed phase otherwise (Pending to Running) or only the
// tree figures the parent sums changed, else never.
func childUpdateWake(old, new *agentsv1.AgentSession) wake {
	switch {
	case old.Status.Phase.IsFinal() != new.Status.Phase.IsFinal():
		return wakeNow
	case old.Status.Phase != new.Status.Phase,
		old.Status.TreeTokens != new.Status.TreeTokens || old.Status.TreeCost != new.Status.TreeCost:
		return wakeLater
	}
	return wakeNever
}

// parentWakeHandler enqueues the parent (the controlling AgentSession) of a
// child session: at once when the child is deleted, ends or starts again,
// and after interval, at low priority, when it is created or changes phase
// otherwise or only its tree figures changed. The queue keeps the earliest
// of the waiting wakes, so the children of a wide fan-out wake their parent
// about once per interval while they start and run (each wake lists the
// parent's children), and the parent's own status write is coalesced on top
// of that (statuswrites.go). A child is only ever created live, so its
// creation changes none of the parent's decisions.
func parentWakeHandler(interval time.Duration) handler.TypedEventHandler[*agentsv1.AgentSession, reconcile.Request] {
	return handler.TypedFuncs[*agentsv1.AgentSession, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*agentsv1.AgentSession], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			w := wakeLater
			if e.Object != nil && e.Object.Status.Phase.IsFinal() {
				w = wakeNow // seen first in a final phase (the cache's first list after a restart)
			}
			wakeParent(e.Object, w, interval, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*agentsv1.AgentSession], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return
			}
			wakeParent(e.ObjectNew, childUpdateWake(e.ObjectOld, e.ObjectNew), interval, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*agentsv1.AgentSession], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			wakeParent(e.Object, wakeNow, interval, q)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*agentsv1.AgentSession], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			wakeParent(e.Object, wakeNow, interval, q)
		},
	}
}

// sessionGroupKind is what a child's controller reference names.
var sessionGroupKind = schema.GroupKind{Group: agentsv1.GroupVersion.Group, Kind: "AgentSession"}

// wakeParent enqueues the parent of child as w says.
func wakeParent(child *agentsv1.AgentSession, w wake, interval time.Duration, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if child == nil || w == wakeNever {
		return
	}
	ref := metav1.GetControllerOf(child)
	if ref == nil {
		return
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || (schema.GroupKind{Group: gv.Group, Kind: ref.Kind}) != sessionGroupKind {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: child.Namespace, Name: ref.Name}}
	if w == wakeNow {
		q.Add(req)
		return
	}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{After: interval, Priority: ptr.To(handler.LowPriority)}, req)
		return
	}
	q.AddAfter(req, interval)
}
