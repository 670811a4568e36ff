package agentsession

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
)

// A session another install holds a live claim on is left alone: no runner
// starts, nothing is written, an Event names the owner; once that claim
// expires this install takes the session over and finishes it.
func TestSessionClaimedByAnotherInstallIsLeftAloneUntilTheClaimExpires(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	pod := getPod(t, s)
	got := waitPhase(t, s, agentsv1.PhaseProvisioning, nil)

	other := "other-ns/agent-operator/other-0"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim.Name(got.UID), Labels: map[string]string{claim.LabelClaim: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(other), LeaseDurationSeconds: ptr.To[int32](6),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if err := testClient.Create(t.Context(), lease); err != nil {
		t.Fatalf("create the other install's claim: %v", err)
	}
	markPodReady(t, pod)
	eventually(t, "the OwnedElsewhere event", func() error {
		var list eventsv1.EventList
		if err := testClient.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.UID == got.UID && e.Reason == ReasonOwnedElsewhere {
				return nil
			}
		}
		return fmt.Errorf("no %s event", ReasonOwnedElsewhere)
	})
	time.Sleep(2 * time.Second) // the claim is live for 6 s: nothing may run meanwhile
	held := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), held); err != nil {
		t.Fatal(err)
	}
	if held.Status.Phase != agentsv1.PhaseProvisioning || held.Status.LastEventSequence != 0 {
		t.Fatalf("while another install holds the claim: phase %s, %d events; want nothing run", held.Status.Phase, held.Status.LastEventSequence)
	}
	if _, ok := testRunner.Progress(got.UID); ok {
		t.Fatal("a runner exists for a session another install holds")
	}

	final := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if final.Status.Turns != 2 {
		t.Errorf("turns = %d after the takeover, want 2", final.Status.Turns)
	}
	// The idle session's runner gave the claim up: the Lease stays (so its
	// transitions, the fencing epoch, only grow) with no holder.
	eventually(t, "the claim released", func() error {
		l := &coordinationv1.Lease{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(lease), l); err != nil {
			return err
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
			return fmt.Errorf("claim still held by %q", h)
		}
		if ptr.Deref(l.Spec.LeaseTransitions, 0) < 1 {
			return fmt.Errorf("leaseTransitions %d after a takeover, want >= 1", ptr.Deref(l.Spec.LeaseTransitions, 0))
		}
		return nil
	})
}

// A session labelled with another install's class is not this install's:
// no finalizer, no pod, no status.
func TestSessionOfAnotherClassIsIgnored(t *testing.T) {
	ns := newNamespace(t)
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("classy"), Namespace: ns, Labels: map[string]string{agentsv1.LabelClass: "staging"}},
		Spec: agentsv1.AgentSessionSpec{Prompt: "p", Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
			ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"}}},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	// A session of this install created after it shows the controller is working.
	mine := scriptedSession(t, ns)
	waitPhase(t, mine, agentsv1.PhaseProvisioning, nil)
	got := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" || len(got.Finalizers) != 0 {
		t.Errorf("another class's session: phase %q finalizers %v, want untouched", got.Status.Phase, got.Finalizers)
	}
	err := testClient.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: s.Name + "-ws"}, &corev1.Pod{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("pod of another class's session: %v, want none", err)
	}
}

// What the reconciler remembers of a session another instance holds (to
// announce each holder once) goes with the session: a manager that saw many
// sessions held elsewhere, on a busy cluster for weeks, kept an entry for
// every one of them.
func TestForeignHolderIsForgottenWithItsSession(t *testing.T) {
	ns := newNamespace(t)
	r := &Reconciler{Client: testClient, Scheme: scheme.Scheme, Recorder: suiteRecorder, Class: "foreign-test",
		Claims: &claim.Claims{Me: suiteInstance}}
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deleted", UID: "9f0c"}}
	r.announceForeign(t.Context(), s, "other/agent-operator/other-0")
	r.announceForeign(t.Context(), s, "other/agent-operator/other-0")
	if len(r.foreign) != 1 {
		t.Fatalf("%d sessions remembered after announcing one, want 1", len(r.foreign))
	}
	// The session is gone (no object of its name): its reconcile forgets it.
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}); err != nil {
		t.Fatalf("reconcile a deleted session: %v", err)
	}
	if len(r.foreign) != 0 {
		t.Errorf("%d sessions still remembered after the session was deleted, want 0", len(r.foreign))
	}
}
