package agentsession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// confineRefusedScript answers the prompt, then a follow-up with one tool
// call (a file written in the workspace) and a last answer.
const confineRefusedScript = `turns:
  - text: "Done."
  - expect: {lastUserContains: "add a comment"}
    text: "Adding the comment."
    toolCalls:
      - name: write_file
        arguments: {file_path: comment.txt, content: "# a comment\n"}
  - text: "Follow-up done."
`

// refusedMessage is what the ValidatingAdmissionPolicy of
// refuseNetworkPolicyWrites says when it refuses a write.
const refusedMessage = "networkpolicy writes are refused in this namespace (test)"

// TestRunnerWaitsWhileThePolicyCannotBeWritten: the API server refuses
// (a real ValidatingAdmissionPolicy) to create NetworkPolicies in the
// namespace of an idle session whose workspace policy was deleted. A
// follow-up message then starts no runner: the model gets no request, no
// tool runs in the workspace, the message is not delivered and
// status.observedGeneration stays behind metadata.generation while the
// session stays Succeeded (not Failed), WorkspaceReady says why
// (ConfinementNotKept, with the refusal) and its status is not rewritten
// over and over. Once the API server takes the write again the policy is written
// again (Warning Event NetworkPolicyRestored) and the follow-up runs, once.
func TestRunnerWaitsWhileThePolicyCannotBeWritten(t *testing.T) {
	ns := newNamespace(t)
	srv := llmtest.StartScript(t, llmtest.Anthropic, llmtest.ParseScript(t, confineRefusedScript))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns, Labels: map[string]string{runner.LabelLLMCredentials: "true"}},
		StringData: map[string]string{"anthropic": "sk-ant-confine"}}
	if err := testClient.Create(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	s := validSession(ns)
	s.Spec.Model.BaseURL = srv.BaseURL()
	s.Spec.Workspace.RetainAfterSuccess = dur(time.Hour) // the idle session keeps its pod
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Done." {
			return fmt.Errorf("result %q", g.Status.Result)
		}
		return nil
	})
	waitRunnerGone(t, got)
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d model requests for the prompt, want 1", n)
	}
	key := types.NamespacedName{Namespace: ns, Name: networkPolicyName(got)}
	first := &networkingv1.NetworkPolicy{}
	if err := testClient.Get(t.Context(), key, first); err != nil {
		t.Fatalf("the idle session's pod has no network policy: %v", err)
	}
	if n := warnings(t, ns, got.UID, ReasonNetworkPolicyRestored); n != 0 {
		t.Fatalf("%d %s Events before the policy was deleted", n, ReasonNetworkPolicyRestored)
	}

	binding := refuseNetworkPolicyWrites(t, ns)
	if err := testClient.Delete(t.Context(), first); err != nil {
		t.Fatalf("delete the workspace policy: %v", err)
	}
	// The follow-up must be reconciled by a manager whose cache has seen the
	// deletion (an intact policy in its cache costs no request, so a cache a
	// few milliseconds behind would not look). A change of
	// retainAfterSuccess, which starts nothing, is reconciled until one such
	// reconcile fails: its conditions carry the new generation,
	// status.observedGeneration does not. A few tries are plenty for the
	// cache; a reconcile that never fails means the refused write was not
	// reported.
	var synced error
	for range 5 {
		if err := updateLatest(t, got, func(g *agentsv1.AgentSession) {
			g.Spec.Workspace.RetainAfterSuccess = dur(g.Spec.Workspace.RetainAfterSuccess.Duration + time.Minute)
		}); err != nil {
			t.Fatalf("change retainAfterSuccess: %v", err)
		}
		if synced = waitReconciled(t, got, got.Generation); synced == nil {
			break
		}
	}
	if synced != nil {
		t.Fatalf("no reconcile failed while the policy was deleted and could not be written: %v", synced)
	}

	if err := updateLatest(t, got, func(g *agentsv1.AgentSession) {
		g.Spec.Messages = append(g.Spec.Messages, agentsv1.Message{Name: "m1", Kind: agentsv1.MessageFollowUp, Text: "Now add a comment"})
	}); err != nil {
		t.Fatalf("append message: %v", err)
	}
	gen := got.Generation
	if err := waitReconciled(t, got, gen); err != nil {
		t.Fatalf("the follow-up's reconcile: %v", err)
	}
	if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(got), got); err != nil {
		t.Fatal(err)
	}
	seen := got.ResourceVersion
	dir, err := workspaces.dir(got)
	if err != nil {
		t.Fatal(err)
	}
	comment := filepath.Join(dir, "comment.txt")
	consistently(t, 3*time.Second, "no runner while the policy cannot be written", func() error {
		if n := len(srv.Requests()); n != 1 {
			return fmt.Errorf("%d model requests, want still 1: the follow-up ran on an unconfined pod", n)
		}
		if _, err := os.Stat(comment); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("a tool ran in the workspace (%s: %v)", comment, err)
		}
		if _, ok := testRunner.Progress(got.UID); ok {
			return errors.New("a runner was started")
		}
		cur := &agentsv1.AgentSession{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(got), cur); err != nil {
			return err
		}
		switch st := cur.Status; {
		case st.Phase != agentsv1.PhaseSucceeded:
			return fmt.Errorf("phase %q (error %q), want Succeeded", st.Phase, st.Error)
		case slices.Contains(st.MessagesDelivered, "m1"):
			return fmt.Errorf("messagesDelivered %v holds the follow-up", st.MessagesDelivered)
		case st.ObservedGeneration >= cur.Generation:
			return fmt.Errorf("observedGeneration %d, generation %d: a reconcile succeeded", st.ObservedGeneration, cur.Generation)
		case cur.ResourceVersion != seen:
			return fmt.Errorf("the session was written again (resourceVersion %s, was %s)", cur.ResourceVersion, seen)
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil ||
			c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonConfinementNotKept || !strings.Contains(c.Message, refusedMessage) {
			return fmt.Errorf("WorkspaceReady = %+v, want False/%s with the API server's refusal", c, agentsv1.ReasonConfinementNotKept)
		}
		np := &networkingv1.NetworkPolicy{}
		if err := testClient.Get(t.Context(), key, np); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the workspace policy is back (%v) although the API server refuses it", err)
		}
		return nil
	})

	if err := testClient.Delete(t.Context(), binding); err != nil {
		t.Fatalf("delete the binding: %v", err)
	}
	eventually(t, "the policy written again once the API server takes it", func() error {
		np := &networkingv1.NetworkPolicy{}
		if err := testClient.Get(t.Context(), key, np); err != nil {
			return err
		}
		if np.UID == first.UID || !equality.Semantic.DeepEqual(np.Spec, first.Spec) || !metav1.IsControlledBy(np, got) {
			return fmt.Errorf("policy %s (owners %v) spec %+v, want a new one controlled by the session with spec %+v",
				np.UID, np.OwnerReferences, np.Spec, first.Spec)
		}
		return nil
	})
	waitWarning(t, ns, got.UID, ReasonNetworkPolicyRestored)
	final := waitPhase(t, got, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Follow-up done." || g.Status.ObservedGeneration != g.Generation {
			return fmt.Errorf("result %q, observedGeneration %d of %d", g.Status.Result, g.Status.ObservedGeneration, g.Generation)
		}
		return nil
	})
	waitRunnerGone(t, final)
	if !slices.Equal(final.Status.MessagesDelivered, []string{"m1"}) {
		t.Errorf("messagesDelivered %v, want [m1]", final.Status.MessagesDelivered)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3: the prompt's and the follow-up's two", n)
	}
	if data, err := os.ReadFile(comment); err != nil || string(data) != "# a comment\n" {
		t.Errorf("comment.txt = %q, %v: the follow-up's tool call did not run", data, err)
	}
	if inputs := journalInputs(t, events.SessionRef{Namespace: ns, Name: got.Name, UID: string(got.UID)}, "Now add a comment"); inputs != 1 {
		t.Errorf("the follow-up reached the journal %d times, want 1", inputs)
	}
}

// waitReconciled waits until a reconcile of generation gen of s wrote its
// conditions, and says whether it failed (status.observedGeneration stays
// behind): nil when it did, an error when it succeeded.
func waitReconciled(t *testing.T, s *agentsv1.AgentSession, gen int64) error {
	t.Helper()
	cur := &agentsv1.AgentSession{}
	eventually(t, fmt.Sprintf("generation %d reconciled", gen), func() error {
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), cur); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, agentsv1.ConditionReady); c == nil || c.ObservedGeneration < gen {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	if cur.Status.ObservedGeneration >= gen {
		return fmt.Errorf("generation %d reconciled without an error", gen)
	}
	return nil
}

// refuseNetworkPolicyWrites makes the API server refuse to create or update
// NetworkPolicies in namespace ns: a ValidatingAdmissionPolicy that denies
// them, bound to ns by its name label. It returns once a create is refused,
// with the binding, whose deletion ends the refusal; both go when t ends.
func refuseNetworkPolicyWrites(t *testing.T, ns string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	t.Helper()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("refuse-netpol")},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"*"},
						Resources: []string{"networkpolicies"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: refusedMessage}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := testClient.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
		t.Cleanup(func() { // t.Context() is done by now
			if err := testClient.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
				t.Errorf("delete %T: %v", o, err)
			}
		})
	}
	// The API server loads admission policies from its informers: probe
	// until a create is refused.
	eventually(t, "the API server refusing NetworkPolicy writes in "+ns, func() error {
		probe := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
		err := testClient.Create(t.Context(), probe)
		switch {
		case err == nil:
			if err := testClient.Delete(t.Context(), probe); err != nil {
				return fmt.Errorf("delete the probe: %w", err)
			}
			return errors.New("a NetworkPolicy was created")
		case !strings.Contains(err.Error(), refusedMessage):
			return fmt.Errorf("create refused, not by the policy: %w", err)
		}
		return nil
	})
	return binding
}

// warnings counts the Warning Events of reason about the object uid.
func warnings(t *testing.T, ns string, uid types.UID, reason string) int {
	t.Helper()
	var list eventsv1.EventList
	if err := testClient.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.Reason == reason && e.Type == corev1.EventTypeWarning {
			n++
		}
	}
	return n
}

// consistently calls cond every 100 ms for d and fails the test at the
// first error: d is the window in which nothing may happen.
func consistently(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !time.Now().Before(end) {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
