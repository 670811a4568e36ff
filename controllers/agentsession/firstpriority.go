package agentsession

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// FirstStatusPriority is the work-queue priority of a session that has no
// phase yet: its first reconcile (one status write, see firstStatus) goes
// before the pod events, runner notifications and polls of the sessions
// already under way (priority 0 and handler.LowPriority), so a session
// created behind a burst says Pending without waiting for the burst.
const FirstStatusPriority = 100

// firstStatusHandler enqueues a session without a phase at
// FirstStatusPriority when the queue is a priority queue (plainly
// otherwise). It is a second watch of AgentSessions beside For, whose
// handler enqueues every session at the default priority: the priority
// queue keeps one entry per session, at the higher of the two.
func firstStatusHandler() handler.TypedEventHandler[*agentsv1.AgentSession, reconcile.Request] {
	return handler.TypedFuncs[*agentsv1.AgentSession, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*agentsv1.AgentSession], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueFirst(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*agentsv1.AgentSession], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueFirst(e.ObjectNew, q)
		},
	}
}

// enqueueFirst adds s's request at FirstStatusPriority when s has no phase.
func enqueueFirst(s *agentsv1.AgentSession, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if s == nil || s.Status.Phase != "" {
		return
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(FirstStatusPriority)}, req)
		return
	}
	q.Add(req)
}
