package agentsession

import (
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestNewSessionGoesBeforeWorkUnderWay: in the priority queue the
// controller uses, busy with the pod events and runner notifications
// (priority 0) and polls (low priority) of running sessions, the request of
// a new session without a phase is handed out first: For's handler adds it
// at priority 0, behind them, and the first-status handler raises it.
func TestNewSessionGoesBeforeWorkUnderWay(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("first-priority-test")
	defer q.ShutDown()
	for i := range 100 {
		prio := 0
		if i%2 == 0 {
			prio = handler.LowPriority
		}
		q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(prio)},
			reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "running-" + strconv.Itoa(i)}})
	}
	var iface workqueue.TypedRateLimitingInterface[reconcile.Request] = q
	fresh := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fresh", ResourceVersion: "1"}}
	// As the controller registers them: For's handler, then the first-status one.
	handler.WithLowPriorityWhenUnchanged(&handler.TypedEnqueueRequestForObject[*agentsv1.AgentSession]{}).
		Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{Object: fresh}, iface)
	firstStatusHandler().Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{Object: fresh}, iface)
	got, prio, _ := q.GetWithPriority()
	if got.Name != fresh.Name || prio != FirstStatusPriority {
		t.Errorf("worker got %s at priority %d first, want the new session %s at %d ahead of 100 running sessions' work",
			got.Name, prio, fresh.Name, FirstStatusPriority)
	}
	q.Done(got)
}

// TestFirstStatusHandler: only a session without a phase is raised; on a
// plain rate-limited queue it is added plainly.
func TestFirstStatusHandler(t *testing.T) {
	cases := []struct {
		name     string
		phase    agentsv1.Phase
		update   bool
		wantPrio *int
	}{
		{"created without a phase", "", false, ptr.To(FirstStatusPriority)},
		{"updated without a phase", "", true, ptr.To(FirstStatusPriority)},
		{"created with a phase (a resync after a restart)", agentsv1.PhaseRunning, false, nil},
		{"updated with a phase", agentsv1.PhasePending, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("first-priority-handler-test")
			defer q.ShutDown()
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "2"},
				Status: agentsv1.AgentSessionStatus{Phase: tc.phase}}
			old := s.DeepCopy()
			old.ResourceVersion = "1"
			h := firstStatusHandler()
			if tc.update {
				h.Update(t.Context(), event.TypedUpdateEvent[*agentsv1.AgentSession]{ObjectOld: old, ObjectNew: s}, q)
			} else {
				h.Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{Object: s}, q)
			}
			if tc.wantPrio == nil {
				if q.Len() != 0 {
					t.Errorf("queue holds %d requests, want none", q.Len())
				}
				return
			}
			got, prio, _ := q.GetWithPriority()
			if got.Name != "s" || prio != *tc.wantPrio {
				t.Errorf("got %s at priority %d, want s at %d", got.Name, prio, *tc.wantPrio)
			}
		})
	}
	plain := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer plain.ShutDown()
	firstStatusHandler().Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{
		Object: &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}}, plain)
	if plain.Len() != 1 {
		t.Errorf("plain queue holds %d requests, want 1", plain.Len())
	}
}
