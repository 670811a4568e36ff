package agentsession

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

func TestSessionLimit(t *testing.T) {
	cases := []struct {
		name       string
		flag       int
		annotation string
		want       int
		wantBad    string
	}{
		{"unlimited", 0, "", 0, ""},
		{"flag only", 5, "", 5, ""},
		{"annotation only", 0, "3", 3, ""},
		{"annotation lowers the flag", 5, "2", 2, ""},
		{"annotation cannot raise the flag", 5, "50", 5, ""},
		{"invalid annotation is ignored", 5, "lots", 5, "lots"},
		{"zero annotation is ignored", 0, "0", 0, "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _, bad := sessionLimit(tc.flag, tc.annotation)
			if got != tc.want || bad != tc.wantBad {
				t.Errorf("sessionLimit(%d, %q) = %d bad %q, want %d bad %q", tc.flag, tc.annotation, got, bad, tc.want, tc.wantBad)
			}
		})
	}
}

func TestSessionsAhead(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(name string, age time.Duration, phase agentsv1.Phase, mut ...func(*agentsv1.AgentSession)) agentsv1.AgentSession {
		s := agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(t0.Add(-age))}, Status: agentsv1.AgentSessionStatus{Phase: phase}}
		for _, m := range mut {
			m(&s)
		}
		return s
	}
	self := mk("self", time.Minute, agentsv1.PhasePending)
	all := []agentsv1.AgentSession{
		self,
		mk("running", time.Hour, agentsv1.PhaseRunning),           // counts
		mk("provisioning-newer", 0, agentsv1.PhaseProvisioning),   // counts: holds a slot
		mk("pending-older", 2*time.Minute, agentsv1.PhasePending), // counts: queued before
		mk("pending-newer", 0, agentsv1.PhasePending),             // queued after
		mk("succeeded", time.Hour, agentsv1.PhaseSucceeded),       // final
		mk("failed", time.Hour, agentsv1.PhaseFailed),             // final
		mk("awaiting", time.Hour, agentsv1.PhaseAwaitingInput),    // counts
		mk("aborting", time.Hour, agentsv1.PhaseRunning, func(s *agentsv1.AgentSession) { s.Spec.Abort = true }),
		mk("child", time.Hour, agentsv1.PhaseRunning, func(s *agentsv1.AgentSession) { s.Spec.ParentRef = &agentsv1.ParentReference{Name: "running"} }), // counts
		mk("deleting", time.Hour, agentsv1.PhaseRunning, func(s *agentsv1.AgentSession) { s.DeletionTimestamp = &metav1.Time{Time: t0} }),
		mk("stale-cache", 0, agentsv1.PhasePending, func(s *agentsv1.AgentSession) { s.Status.PodName = "stale-cache-ws" }), // counts
	}
	if got := sessionsAhead(&self, all); got != 6 {
		t.Errorf("sessionsAhead = %d, want 6 (running, provisioning-newer, pending-older, awaiting, child, stale-cache)", got)
	}
}

// TestNamespaceQuotaHoldsSessionsPending: with the namespace annotation set
// to 1, a second session creates no pod and waits Pending with reason
// QuotaExceeded and a message naming the limit; it starts once the first one
// finishes.
func TestNamespaceQuotaHoldsSessionsPending(t *testing.T) {
	ns := newNamespace(t)
	setMaxSessions(t, ns, "1")
	first := validSession(ns)
	if err := testClient.Create(t.Context(), first); err != nil {
		t.Fatalf("create first session: %v", err)
	}
	getPod(t, first) // the pod is not marked Ready: the first session stays Provisioning
	second := validSession(ns)
	if err := testClient.Create(t.Context(), second); err != nil {
		t.Fatalf("create second session: %v", err)
	}
	want := fmt.Sprintf("namespace %s allows 1 concurrent sessions (namespace annotation %s) and 1 are running or queued before this one",
		ns, agentsv1.AnnotationMaxSessions)
	waitPhase(t, second, agentsv1.PhasePending, func(g *agentsv1.AgentSession) error {
		c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionReady)
		if c == nil || c.Reason != agentsv1.ReasonQuotaExceeded || !strings.Contains(c.Message, want) {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
	pod := &corev1.Pod{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: second.Name + "-ws"}, pod); !apierrors.IsNotFound(err) {
		t.Fatalf("a session over the quota got a pod: %v", err)
	}

	if err := updateLatest(t, first, func(s *agentsv1.AgentSession) { s.Spec.Abort = true }); err != nil {
		t.Fatalf("abort the first session: %v", err)
	}
	waitPhase(t, first, agentsv1.PhaseAborted, nil)
	getPod(t, second)
	waitPhase(t, second, agentsv1.PhaseProvisioning, func(g *agentsv1.AgentSession) error {
		if c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionReady); c == nil || c.Reason == agentsv1.ReasonQuotaExceeded {
			return fmt.Errorf("Ready condition %+v", c)
		}
		return nil
	})
}

// setMaxSessions sets the namespace's session quota annotation.
func setMaxSessions(t *testing.T, ns, limit string) {
	t.Helper()
	nsObj := &corev1.Namespace{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Annotations = map[string]string{agentsv1.AnnotationMaxSessions: limit}
	if err := testClient.Update(t.Context(), nsObj); err != nil {
		t.Fatalf("annotate namespace: %v", err)
	}
}
