package agentsession

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// unservedGrace is the --report-unserved-after of the installs these tests
// start: whole seconds, as creationTimestamp (which it counts from) and a
// condition's lastTransitionTime have second precision.
const unservedGrace = time.Second

func TestUnservedDue(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name     string
		grace    time.Duration
		phase    agentsv1.Phase
		deleting bool
		now      time.Time
		wantDue  bool
		wantWait time.Duration
	}{
		{"reporting disabled", 0, "", false, created.Add(time.Hour), false, 0},
		{"young session waits for the rest of the grace", time.Minute, "", false, created.Add(20 * time.Second), true, 40 * time.Second},
		{"grace over: report now", time.Minute, "", false, created.Add(time.Minute), true, 0},
		{"long overdue: report now", time.Minute, "", false, created.Add(time.Hour), true, 0},
		{"taken up by its install", time.Minute, agentsv1.PhaseProvisioning, false, created.Add(time.Hour), false, 0},
		{"reported already", time.Minute, agentsv1.PhasePending, false, created.Add(time.Hour), false, 0},
		{"being deleted", time.Minute, "", true, created.Add(time.Hour), false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
			s.Status.Phase = tc.phase
			if tc.deleting {
				s.DeletionTimestamp = ptr.To(metav1.NewTime(created))
			}
			wait, due := unservedDue(s, tc.grace, tc.now)
			if due != tc.wantDue || wait != tc.wantWait {
				t.Errorf("unservedDue = %s, %t; want %s, %t", wait, due, tc.wantWait, tc.wantDue)
			}
		})
	}
}

func TestWatchedSessions(t *testing.T) {
	cases := []struct {
		name   string
		class  string // the install's
		report time.Duration
		labels map[string]string
		phase  agentsv1.Phase
		want   bool
	}{
		{"own class", "a", 0, map[string]string{agentsv1.LabelClass: "a"}, agentsv1.PhaseRunning, true},
		{"default install, unlabelled", "", 0, nil, "", true},
		{"other class, reporting disabled", "a", 0, map[string]string{agentsv1.LabelClass: "b"}, "", false},
		{"other class not taken up", "a", time.Minute, map[string]string{agentsv1.LabelClass: "b"}, "", true},
		{"unlabelled, not taken up, seen by a classed install", "a", time.Minute, nil, "", true},
		{"other class with a phase", "a", time.Minute, map[string]string{agentsv1.LabelClass: "b"}, agentsv1.PhasePending, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Class: tc.class, ReportUnservedAfter: tc.report}
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
			s.Status.Phase = tc.phase
			if got := r.watched(s); got != tc.want {
				t.Errorf("watched = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestUnservedMessageNamesTheClassAndTheRemedy(t *testing.T) {
	cases := []struct {
		class string
		want  []string
	}{
		{"x", []string{`no operator install handles class "x" in this namespace`, "--session-class=x"}},
		{"", []string{`class ""`, agentsv1.LabelClass, "without --session-class"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q", tc.class), func(t *testing.T) {
			msg := unservedMessage(tc.class)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

// The install serving the class turns a reported session's Accepted True in
// its first status write, and never adds Accepted to other sessions.
func TestComputeStatusAcceptsAReportedSession(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	reported := agentsv1.AgentSessionStatus{Phase: agentsv1.PhasePending, Conditions: []metav1.Condition{{
		Type: agentsv1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: agentsv1.ReasonClassNotServed,
		Message: unservedMessage("late"), LastTransitionTime: now}}}
	cases := []struct {
		name       string
		status     agentsv1.AgentSessionStatus
		obs        observation
		wantPhase  agentsv1.Phase
		wantAccept *metav1.ConditionStatus
	}{
		{"never reported: no Accepted condition", agentsv1.AgentSessionStatus{}, observation{},
			agentsv1.PhasePending, nil},
		{"reported, no pod yet", reported, observation{}, agentsv1.PhasePending, ptr.To(metav1.ConditionTrue)},
		{"reported, pod created", reported, observation{pod: pendingPod()}, agentsv1.PhaseProvisioning, ptr.To(metav1.ConditionTrue)},
		{"reported, pod ready", reported, observation{pod: readyPod()}, agentsv1.PhaseRunning, ptr.To(metav1.ConditionTrue)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 2,
				Labels: map[string]string{agentsv1.LabelClass: "late"}}}
			s.Status = *tc.status.DeepCopy()
			st := computeStatus(s, tc.obs, now)
			if st.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.wantPhase)
			}
			c := meta.FindStatusCondition(st.Conditions, agentsv1.ConditionAccepted)
			switch {
			case tc.wantAccept == nil && c != nil:
				t.Errorf("Accepted = %+v, want none", c)
			case tc.wantAccept != nil && (c == nil || c.Status != *tc.wantAccept || c.Reason != agentsv1.ReasonClassServed ||
				!strings.Contains(c.Message, `"late"`) || c.ObservedGeneration != 2):
				t.Errorf("Accepted = %+v, want %s/%s naming the class at generation 2", c, *tc.wantAccept, agentsv1.ReasonClassServed)
			}
		})
	}
}

// A session labelled with a class no install serves is reported once the
// grace passed: phase Pending, Accepted=False/ClassNotServed, one Warning
// Event, however many installs see it; no install takes it up.
func TestSessionOfAClassNoInstallServesSaysSo(t *testing.T) {
	ns := newNamespace(t)
	startInstall(t, "reporter-a", unservedGrace, ns)
	startInstall(t, "reporter-b", unservedGrace, ns)
	s := classSession(t, ns, "nobody")

	got := waitPhase(t, s, agentsv1.PhasePending, notServed("nobody"))
	reported := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionAccepted).LastTransitionTime
	if due := got.CreationTimestamp.Add(unservedGrace); reported.Time.Before(due) {
		t.Errorf("reported at %s, before the grace ended at %s", reported.UTC(), due.UTC())
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("finalizers %v on an unserved session, want none", got.Finalizers)
	}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: s.Name + "-ws"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod of an unserved session: %v, want none", err)
	}
	eventually(t, "the ClassNotServed event", func() error { return wantEvents(t, got, corev1.EventTypeWarning, 1) })

	// A later session reported by the same installs shows they are past s:
	// the losing install's retry wrote nothing more.
	later := classSession(t, ns, "nobody")
	laterGot := waitPhase(t, later, agentsv1.PhasePending, notServed("nobody"))
	eventually(t, "the later session's ClassNotServed event", func() error {
		return wantEvents(t, laterGot, corev1.EventTypeWarning, 1)
	})
	if err := wantEvents(t, got, corev1.EventTypeWarning, 1); err != nil {
		t.Error(err)
	}
	now := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), now); err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != got.ResourceVersion {
		t.Errorf("the reported session was written again: resourceVersion %s, then %s", got.ResourceVersion, now.ResourceVersion)
	}
}

// A session reported unserved is taken up by the install of its class that
// starts later, runs to the end as usual, and says it was accepted.
func TestReportedSessionIsTakenUpByTheInstallOfItsClass(t *testing.T) {
	ns := newNamespace(t)
	startInstall(t, "reporter", unservedGrace, ns)
	s := classSession(t, ns, "late")
	waitPhase(t, s, agentsv1.PhasePending, notServed("late"))

	startInstall(t, "late", unservedGrace, ns)
	pod := getPod(t, s)
	markPodReady(t, pod)
	final := waitPhase(t, s, agentsv1.PhaseSucceeded, func(got *agentsv1.AgentSession) error {
		c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionAccepted)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != agentsv1.ReasonClassServed {
			return fmt.Errorf("Accepted = %+v, want True/%s", c, agentsv1.ReasonClassServed)
		}
		return nil
	})
	if final.Status.Turns != 2 {
		t.Errorf("turns = %d, want 2", final.Status.Turns)
	}
	if err := wantEvents(t, final, corev1.EventTypeWarning, 1); err != nil {
		t.Error(err) // reported once, never again after it was taken up
	}
}

// A session of another class that has a phase is never touched by an
// install reporting unserved sessions.
func TestSessionOfAnotherClassWithAPhaseIsNotTouched(t *testing.T) {
	ns := newNamespace(t)
	s := classSession(t, ns, "elsewhere")
	s.Status.Phase = agentsv1.PhaseRunning
	if err := testClient.Status().Update(t.Context(), s); err != nil {
		t.Fatalf("set the other install's phase: %v", err)
	}
	startInstall(t, "reporter", unservedGrace, ns)

	// A session of the same class without a phase, created later, is
	// reported: the install is past the grace of the first one too.
	sentinel := classSession(t, ns, "elsewhere")
	waitPhase(t, sentinel, agentsv1.PhasePending, notServed("elsewhere"))

	got := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != s.ResourceVersion || got.Status.Phase != agentsv1.PhaseRunning ||
		meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionAccepted) != nil {
		t.Errorf("session with a phase was touched: resourceVersion %s (was %s), phase %s, conditions %+v",
			got.ResourceVersion, s.ResourceVersion, got.Status.Phase, got.Status.Conditions)
	}
	if err := wantEvents(t, got, corev1.EventTypeWarning, 0); err != nil {
		t.Error(err)
	}
}

// notServed checks that a session says no install serves class.
func notServed(class string) func(*agentsv1.AgentSession) error {
	return func(s *agentsv1.AgentSession) error {
		c := meta.FindStatusCondition(s.Status.Conditions, agentsv1.ConditionAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonClassNotServed {
			return fmt.Errorf("Accepted = %+v, want False/%s", c, agentsv1.ReasonClassNotServed)
		}
		if want := unservedMessage(class); c.Message != want {
			return fmt.Errorf("Accepted message %q, want %q", c.Message, want)
		}
		return nil
	}
}

// wantEvents checks that s has n ClassNotServed Events, of type kind.
func wantEvents(t *testing.T, s *agentsv1.AgentSession, kind string, n int) error {
	t.Helper()
	var list eventsv1.EventList
	if err := testClient.List(t.Context(), &list, client.InNamespace(s.Namespace)); err != nil {
		return err
	}
	got := 0
	for _, e := range list.Items {
		if e.Regarding.UID != s.UID || e.Reason != agentsv1.ReasonClassNotServed {
			continue
		}
		if e.Type != kind || e.Note != unservedMessage(s.Labels[agentsv1.LabelClass]) {
			return fmt.Errorf("event %s %s %q, want %s with the condition's message", e.Type, e.Reason, e.Note, kind)
		}
		got++
	}
	if got != n {
		return fmt.Errorf("%d %s events for %s, want %d", got, agentsv1.ReasonClassNotServed, s.Name, n)
	}
	return nil
}

// classSession creates a scripted session labelled with class.
func classSession(t *testing.T, ns, class string) *agentsv1.AgentSession {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "script", Namespace: ns}, Data: map[string]string{"script.yaml": script}}
	if err := testClient.Create(t.Context(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("classy"), Namespace: ns, Labels: map[string]string{agentsv1.LabelClass: class}},
		Spec: agentsv1.AgentSessionSpec{Prompt: "Write hello.py", Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted,
			Name: "demo", ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"}}},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s
}

// startInstall runs a second operator install beside the suite's until the
// test ends: its own manager (its cache limited to namespaces, as
// --watch-namespaces does), reconciler and runner, handling class and
// reporting other classes' sessions no install took up after reportAfter.
func startInstall(t *testing.T, class string, reportAfter time.Duration, namespaces ...string) {
	t.Helper()
	opts := CacheOptions()
	opts.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range namespaces {
		opts.DefaultNamespaces[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{
		Scheme:     scheme.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      opts,
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // the suite's manager has one of that name
	})
	if err != nil {
		t.Fatalf("new manager of install %q: %v", class, err)
	}
	me := claim.Holder{Install: "install-" + class + "/agent-operator", Pod: "install-" + class + "-0"}
	rec, run := wireInstall(t, mgr, &claim.Claims{Me: me})
	rec.Class = class
	rec.ReportUnservedAfter = reportAfter
	if err := rec.SetupWithManager(mgr); err != nil {
		t.Fatalf("set up install %q: %v", class, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		_ = run.Shutdown(context.Background())
		cancel()
		if err := <-done; err != nil {
			t.Errorf("install %q stopped: %v", class, err)
		}
	})
}

// wireInstall makes the reconciler and runner of another install (or
// replica) started by a test on mgr, claiming as proto says (its Me,
// Duration and Sharded; the clients are mgr's). The caller sets the class
// and the rest, then calls SetupWithManager.
func wireInstall(t *testing.T, mgr ctrl.Manager, proto *claim.Claims) (*Reconciler, *runner.Runner) {
	t.Helper()
	claims := func(r client.Reader) *claim.Claims {
		c := *proto
		c.Client, c.Reader = mgr.GetClient(), r
		return &c
	}
	rec := NewReconciler()
	run, err := runner.New(runner.Options{
		Claims:    claims(mgr.GetAPIReader()), // claims are taken on fresh reads
		Reader:    mgr.GetAPIReader(),
		Journals:  testJS,
		Clients:   runner.ProviderClients,
		Envs:      workspaces.envFactory,
		Client:    mgr.GetClient(),
		Informers: mgr.GetCache(),
		Notify:    rec.Notify,
		Log:       logr.Discard(),
		Prices:    suitePrices,
	})
	if err != nil {
		t.Fatalf("new runner of %s: %v", proto.Me, err)
	}
	rec.Client = mgr.GetClient()
	rec.Scheme = mgr.GetScheme()
	rec.Recorder = mgr.GetEventRecorder("agent-operator-" + proto.Me.Pod)
	rec.Runner = run
	rec.Images = suiteImages
	rec.Claims = claims(mgr.GetClient())
	return rec, run
}
