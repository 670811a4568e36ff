package agentsession

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestAdmissionWritesOnlyTheFirstStatus: the admission controller gives a
// new session of its class its Pending status and does nothing else (no
// finalizer, no pod: the main controller does those); it leaves alone a
// session that already has a phase and one of another class. The sessions
// carry a class the suite's manager does not serve, so only this test's
// reconciler acts on them.
func TestAdmissionWritesOnlyTheFirstStatus(t *testing.T) {
	const class = "admission-test"
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := admission{r: &Reconciler{Client: testClient, Scheme: scheme.Scheme, Recorder: suiteRecorder,
		Images: suiteImages, EventsPrefix: "agents", Class: class, Now: func() time.Time { return now }}}
	cases := []struct {
		name      string
		class     string
		phase     agentsv1.Phase
		wantPhase agentsv1.Phase
	}{
		{"a new session gets Pending", class, "", agentsv1.PhasePending},
		{"a session with a phase is left alone", class, agentsv1.PhaseRunning, agentsv1.PhaseRunning},
		{"another class's session is left alone", "someone-else", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			s := validSession(ns)
			s.Labels = map[string]string{agentsv1.LabelClass: tc.class}
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatalf("create session: %v", err)
			}
			if tc.phase != "" {
				s.Status.Phase = tc.phase
				if err := testClient.Status().Update(t.Context(), s); err != nil {
					t.Fatalf("set phase: %v", err)
				}
			}
			if a.unphased(s) != (tc.phase == "" && tc.class == class) {
				t.Errorf("unphased(%s, %q) = %t", tc.class, tc.phase, a.unphased(s))
			}
			res, err := a.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)})
			if err != nil || res.Requeue || res.RequeueAfter != 0 {
				t.Fatalf("reconcile: %+v, %v; want done, no requeue", res, err)
			}
			got := &agentsv1.AgentSession{}
			if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.wantPhase {
				t.Errorf("phase %q, want %q", got.Status.Phase, tc.wantPhase)
			}
			if len(got.Finalizers) != 0 {
				t.Errorf("finalizers %v: admission writes the status only", got.Finalizers)
			}
			err = testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: s.Name + "-ws"}, &corev1.Pod{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("workspace pod: %v, want none (admission creates nothing)", err)
			}
		})
	}
}

// TestMainControllerLeavesFirstStatusToAdmission: with admission workers,
// the main controller does nothing for a session without a phase (the
// admission controller writes it; two writers of one patch would make one
// fail with a conflict for every new session), and without them it writes
// the first status itself.
func TestMainControllerLeavesFirstStatusToAdmission(t *testing.T) {
	const class = "admission-main-test"
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		workers   int
		wantPhase agentsv1.Phase
	}{
		{"with admission workers", 2, ""},
		{"without", 0, agentsv1.PhasePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Client: testClient, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: testRunner,
				Images: suiteImages, EventsPrefix: "agents", Class: class, AdmissionWorkers: tc.workers,
				Now: func() time.Time { return now }}
			s := validSession(newNamespace(t))
			s.Labels = map[string]string{agentsv1.LabelClass: class}
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatalf("create session: %v", err)
			}
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			got := &agentsv1.AgentSession{}
			if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != tc.wantPhase || len(got.Finalizers) != 0 {
				t.Errorf("phase %q finalizers %v, want phase %q and no finalizer", got.Status.Phase, got.Finalizers, tc.wantPhase)
			}
		})
	}
}
