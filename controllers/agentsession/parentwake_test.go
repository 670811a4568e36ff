package agentsession

import (
	"slices"
	"testing"
	"time"

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

func TestChildUpdateWake(t *testing.T) {
	base := agentsv1.AgentSession{Status: agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning, Turns: 1, TreeTokens: 10, TreeCost: "0.1"}}
	cases := []struct {
		name   string
		mutate func(*agentsv1.AgentSession)
		want   wake
	}{
		{"ended", func(s *agentsv1.AgentSession) { s.Status.Phase = agentsv1.PhaseSucceeded }, wakeNow},
		{"failed", func(s *agentsv1.AgentSession) { s.Status.Phase = agentsv1.PhaseFailed }, wakeNow},
		{"live phase to live phase", func(s *agentsv1.AgentSession) { s.Status.Phase = agentsv1.PhaseAwaitingInput }, wakeLater},
		{"phase cleared", func(s *agentsv1.AgentSession) { s.Status.Phase = "" }, wakeLater},
		{"tree tokens", func(s *agentsv1.AgentSession) { s.Status.TreeTokens = 20 }, wakeLater},
		{"tree cost", func(s *agentsv1.AgentSession) { s.Status.TreeCost = "0.2" }, wakeLater},
		{"own counters only", func(s *agentsv1.AgentSession) { s.Status.Turns, s.Status.ToolCalls = 2, 3 }, wakeNever},
		{"result text only", func(s *agentsv1.AgentSession) { s.Status.Result = "done so far" }, wakeNever},
		{"spec change", func(s *agentsv1.AgentSession) { s.Spec.Abort = true }, wakeNever},
		{"nothing", func(*agentsv1.AgentSession) {}, wakeNever},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old, new := base.DeepCopy(), base.DeepCopy()
			tc.mutate(new)
			if got := childUpdateWake(old, new); got != tc.want {
				t.Errorf("childUpdateWake = %d, want %d", got, tc.want)
			}
		})
	}
	// From one phase to another: at once exactly when the child ends or
	// starts again after its end (whether it is live is what the parent's
	// decisions read).
	phases := []struct {
		from, to agentsv1.Phase
		want     wake
	}{
		{"", agentsv1.PhasePending, wakeLater},
		{agentsv1.PhasePending, agentsv1.PhaseProvisioning, wakeLater},
		{agentsv1.PhaseProvisioning, agentsv1.PhaseRunning, wakeLater},
		{agentsv1.PhaseRunning, agentsv1.PhaseAwaitingInput, wakeLater},
		{agentsv1.PhaseRunning, agentsv1.PhaseSucceeded, wakeNow},
		{agentsv1.PhasePending, agentsv1.PhaseAborted, wakeNow},
		{agentsv1.PhaseSucceeded, agentsv1.PhaseRunning, wakeNow}, // a follow-up message
	}
	for _, tc := range phases {
		old, new := base.DeepCopy(), base.DeepCopy()
		old.Status.Phase, new.Status.Phase = tc.from, tc.to
		if got := childUpdateWake(old, new); got != tc.want {
			t.Errorf("childUpdateWake(%q -> %q) = %d, want %d", tc.from, tc.to, got, tc.want)
		}
	}
}

// recordingQueue is a priority queue that records what is added to it.
type recordingQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	adds []recordedAdd
}

type recordedAdd struct {
	req   reconcile.Request
	after time.Duration
	prio  int
}

func (q *recordingQueue) Add(r reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, r) }

func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: d}, r)
}

func (q *recordingQueue) AddWithOpts(o priorityqueue.AddOpts, rs ...reconcile.Request) {
	for _, r := range rs {
		q.adds = append(q.adds, recordedAdd{req: r, after: o.After, prio: ptr.Deref(o.Priority, 0)})
	}
}

// TestParentWakeHandler: which events of a child enqueue its parent, and
// when.
func TestParentWakeHandler(t *testing.T) {
	parent := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "parent", UID: "p-uid"}}
	child := func(phase agentsv1.Phase, tokens int64, owned bool) *agentsv1.AgentSession {
		c := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child", ResourceVersion: "1"},
			Status: agentsv1.AgentSessionStatus{Phase: phase, TreeTokens: tokens}}
		if owned {
			c.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(parent, agentsv1.GroupVersion.WithKind("AgentSession"))}
		}
		return c
	}
	update := func(old, new *agentsv1.AgentSession) func(workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		new.ResourceVersion = "2"
		return func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			parentWakeHandler(wakeInterval).Update(t.Context(), event.TypedUpdateEvent[*agentsv1.AgentSession]{ObjectOld: old, ObjectNew: new}, q)
		}
	}
	parentReq := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: parent.Name}}
	cases := []struct {
		name string
		send func(q workqueue.TypedRateLimitingInterface[reconcile.Request])
		want []recordedAdd
	}{
		{"created", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			parentWakeHandler(wakeInterval).Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{Object: child("", 0, true)}, q)
		}, []recordedAdd{{req: parentReq, after: wakeInterval, prio: handler.LowPriority}}},
		{"first seen ended", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			parentWakeHandler(wakeInterval).Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{Object: child(agentsv1.PhaseSucceeded, 0, true)}, q)
		}, []recordedAdd{{req: parentReq}}},
		{"started running", update(child(agentsv1.PhasePending, 0, true), child(agentsv1.PhaseRunning, 0, true)),
			[]recordedAdd{{req: parentReq, after: wakeInterval, prio: handler.LowPriority}}},
		{"deleted", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			parentWakeHandler(wakeInterval).Delete(t.Context(), event.TypedDeleteEvent[*agentsv1.AgentSession]{Object: child(agentsv1.PhaseRunning, 5, true)}, q)
		}, []recordedAdd{{req: parentReq}}},
		{"phase changed", update(child(agentsv1.PhaseRunning, 5, true), child(agentsv1.PhaseSucceeded, 5, true)),
			[]recordedAdd{{req: parentReq}}},
		{"tree figures changed", update(child(agentsv1.PhaseRunning, 5, true), child(agentsv1.PhaseRunning, 9, true)),
			[]recordedAdd{{req: parentReq, after: wakeInterval, prio: handler.LowPriority}}},
		{"nothing the parent shows changed", update(child(agentsv1.PhaseRunning, 5, true), child(agentsv1.PhaseRunning, 5, true)), nil},
		{"top-level session", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			parentWakeHandler(wakeInterval).Create(t.Context(), event.TypedCreateEvent[*agentsv1.AgentSession]{Object: child("", 0, false)}, q)
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := &recordingQueue{PriorityQueue: priorityqueue.New[reconcile.Request]("parent-wake-test")}
			defer q.ShutDown()
			tc.send(q)
			if !slices.Equal(q.adds, tc.want) {
				t.Errorf("added %+v, want %+v", q.adds, tc.want)
			}
		})
	}
}

const wakeInterval = 5 * time.Second
