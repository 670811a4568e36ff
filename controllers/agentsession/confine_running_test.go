package agentsession

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// A running session whose workspace policy is deleted while the API server
// refuses to write it again: its runner is suspended (the old code let it
// go on running tools in the unconfined pod), the session stays Running
// with WorkspaceReady=False/ConfinementNotKept, and no runner starts while
// the write is refused. Once the API server takes it, the policy is back
// and the session resumes from its journal: the command cut short gets an
// error result and is not run again.
func TestRunningSessionIsSuspendedWhileThePolicyCannotBeWritten(t *testing.T) {
	s, _ := blockedSession(t, nil)
	key := types.NamespacedName{Namespace: s.Namespace, Name: networkPolicyName(s)}
	np := &networkingv1.NetworkPolicy{}
	if err := testClient.Get(t.Context(), key, np); err != nil {
		t.Fatalf("the running session's pod has no network policy: %v", err)
	}
	binding := refuseNetworkPolicyWrites(t, s.Namespace)
	if err := testClient.Delete(t.Context(), np); err != nil {
		t.Fatalf("delete the workspace policy: %v", err)
	}
	notConfined := func() error {
		cur := &agentsv1.AgentSession{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), cur); err != nil {
			return err
		}
		if testRunner.Running(s.UID) {
			return errors.New("the runner runs in the unconfined pod")
		}
		if cur.Status.Phase != agentsv1.PhaseRunning {
			return fmt.Errorf("phase %q (error %q), want Running", cur.Status.Phase, cur.Status.Error)
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil ||
			c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonConfinementNotKept {
			return fmt.Errorf("WorkspaceReady = %+v, want False/%s", c, agentsv1.ReasonConfinementNotKept)
		}
		return nil
	}
	eventually(t, "the runner suspended", notConfined)
	consistently(t, 2*time.Second, "no runner while the policy cannot be written", notConfined)

	if err := testClient.Delete(t.Context(), binding); err != nil {
		t.Fatalf("delete the binding: %v", err)
	}
	eventually(t, "the policy written again", func() error { return testClient.Get(t.Context(), key, &networkingv1.NetworkPolicy{}) })
	waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Resumed after the interruption." {
			return fmt.Errorf("result %q", g.Status.Result)
		}
		return nil
	})
	dir, err := workspaces.dir(s)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "runs.txt")); err != nil || string(b) != "started\n" {
		t.Errorf("runs.txt = %q, %v; want the command started once", b, err)
	}
}
