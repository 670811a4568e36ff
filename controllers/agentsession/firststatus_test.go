package agentsession

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestFirstStatusComesBeforeTheWorkspace: the first version of a new
// session that has a phase says Pending with the queued message and nothing
// else was done for it yet (no pod name, no finalizer), and it was written
// before its NetworkPolicy and its pod were created. Order is read from
// resourceVersions, which envtest's single etcd hands out in write order
// across all resources; no time is measured.
func TestFirstStatusComesBeforeTheWorkspace(t *testing.T) {
	ns := newNamespace(t)
	wc, err := client.NewWithWatch(testCfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := wc.Watch(t.Context(), &agentsv1.AgentSessionList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watch sessions: %v", err)
	}
	defer sessions.Stop()
	pods, err := wc.Watch(t.Context(), &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watch pods: %v", err)
	}
	defer pods.Stop()
	policies, err := wc.Watch(t.Context(), &networkingv1.NetworkPolicyList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watch network policies: %v", err)
	}
	defer policies.Stop()

	s := validSession(ns)
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	var first *agentsv1.AgentSession
	for first == nil {
		got := nextAdded[*agentsv1.AgentSession](t, sessions, "a session version")
		if got.Status.Phase != "" {
			first = got
		}
	}
	if first.Status.Phase != agentsv1.PhasePending || first.Status.PodName != "" {
		t.Errorf("first status: phase %q pod %q, want Pending and no pod yet", first.Status.Phase, first.Status.PodName)
	}
	if c := meta.FindStatusCondition(first.Status.Conditions, agentsv1.ConditionReady); c == nil ||
		c.Reason != agentsv1.ReasonPending || c.Message != QueuedMessage {
		t.Errorf("first Ready condition %+v, want reason %s and message %q", c, agentsv1.ReasonPending, QueuedMessage)
	}
	if len(first.Finalizers) != 0 {
		t.Errorf("first status written after the finalizer %v: the first reconcile does nothing else", first.Finalizers)
	}
	statusRV := rv(t, first)
	policy := nextAdded[*networkingv1.NetworkPolicy](t, policies, "the session's NetworkPolicy")
	pod := nextAdded[*corev1.Pod](t, pods, "the session's pod")
	if got := rv(t, policy); got <= statusRV {
		t.Errorf("NetworkPolicy created at resourceVersion %d, not after the first status (%d)", got, statusRV)
	}
	if got := rv(t, pod); got <= statusRV {
		t.Errorf("pod created at resourceVersion %d, not after the first status (%d)", got, statusRV)
	}
}

// nextAdded returns the object of the next ADDED or MODIFIED event of w.
func nextAdded[T client.Object](t *testing.T, w watch.Interface, what string) T {
	t.Helper()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended before %s", what)
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if o, ok := ev.Object.(T); ok {
				return o
			}
		case <-t.Context().Done():
			t.Fatalf("no %s", what)
		}
	}
}

func rv(t *testing.T, o client.Object) int64 {
	t.Helper()
	n, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q of %s: %v", o.GetResourceVersion(), o.GetName(), err)
	}
	return n
}

// TestNewSessionGoesBeforeQuotaPolls: a session held by the quota asks for
// its next look at low priority, so in controller-runtime's priority queue a
// newly created session (its Create event) is handed to a worker before a
// queue full of due quota polls.
func TestNewSessionGoesBeforeQuotaPolls(t *testing.T) {
	ns := newNamespace(t)
	setMaxSessions(t, ns, "1")
	first := validSession(ns)
	if err := testClient.Create(t.Context(), first); err != nil {
		t.Fatalf("create first session: %v", err)
	}
	getPod(t, first)
	held := validSession(ns)
	if err := testClient.Create(t.Context(), held); err != nil {
		t.Fatalf("create held session: %v", err)
	}
	waitPhase(t, held, agentsv1.PhasePending, func(g *agentsv1.AgentSession) error {
		if c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionReady); c == nil || c.Reason != agentsv1.ReasonQuotaExceeded {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})

	// The real reconcile of the held session (a second reconciler on an
	// uncached client: it writes what the suite's does).
	rec := &Reconciler{Client: testClient, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: testRunner,
		Images: suiteImages, EventsPrefix: "agents", Now: time.Now}
	res, err := rec.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: held.Name}})
	if err != nil {
		t.Fatalf("reconcile held session: %v", err)
	}
	if res.RequeueAfter != quotaPoll || res.Priority == nil || *res.Priority != handler.LowPriority {
		t.Fatalf("held session's result %+v, want RequeueAfter %s at priority %d", res, quotaPoll, handler.LowPriority)
	}

	// The queue a controller gets by default (UsePriorityQueue), busy with
	// the due polls of many held sessions when a new session is created.
	q := priorityqueue.New[reconcile.Request]("first-status-test")
	defer q.ShutDown()
	for i := range 50 {
		q.AddWithOpts(priorityqueue.AddOpts{Priority: res.Priority},
			reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "held-" + strconv.Itoa(i)}})
	}
	fresh := validSession(ns)
	var iface workqueue.TypedRateLimitingInterface[reconcile.Request] = q
	(&handler.EnqueueRequestForObject{}).Create(t.Context(), event.CreateEvent{Object: fresh}, iface)
	got, _ := q.Get()
	if got.Name != fresh.Name {
		t.Errorf("worker got %s first, want the new session %s ahead of 50 quota polls", got.Name, fresh.Name)
	}
}
