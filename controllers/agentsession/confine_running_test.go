package agentsession

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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

// A child running in its parent's workspace pod is suspended with the parent
// while the pod's policy cannot be written again: the parent keeps the pod's
// confinement, and the old code let the child go on running tools in the
// unconfined pod. Both resume from their journals once the write is taken.
func TestSharedWorkspaceChildIsSuspendedWhileThePolicyCannotBeWritten(t *testing.T) {
	parent, _ := blockedSession(t, nil)
	ns := parent.Namespace
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child-blocked", Namespace: ns},
		Data: map[string]string{"script.yaml": blockedScriptWith("child-runs.txt", "Child resumed after the interruption.")}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	// A child as the manager spawns it into the parent's workspace.
	child := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("child"), Namespace: ns,
			Annotations:     map[string]string{agentsv1.AnnotationSharedWorkspace: parent.Name},
			Labels:          map[string]string{agentsv1.LabelParent: parent.Name, agentsv1.LabelParentUID: string(parent.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, agentsv1.GroupVersion.WithKind("AgentSession"))}},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Run the child's job",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm.Name}},
			ParentRef: &agentsv1.ParentReference{Name: parent.Name, UID: string(parent.UID)},
			Depth:     ptr.To[int32](1),
		},
	}
	if err := testClient.Create(t.Context(), child); err != nil {
		t.Fatalf("create child: %v", err)
	}
	dir, err := workspaces.dir(parent)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the child's command running in the shared workspace", func() error {
		if _, err := os.Stat(filepath.Join(dir, "child-runs.txt")); err != nil {
			return err
		}
		if !testRunner.Running(child.UID) {
			return errors.New("the child's runner is not running")
		}
		return nil
	})

	key := types.NamespacedName{Namespace: ns, Name: networkPolicyName(parent)}
	np := &networkingv1.NetworkPolicy{}
	if err := testClient.Get(t.Context(), key, np); err != nil {
		t.Fatalf("the running session's pod has no network policy: %v", err)
	}
	binding := refuseNetworkPolicyWrites(t, ns)
	if err := testClient.Delete(t.Context(), np); err != nil {
		t.Fatalf("delete the workspace policy: %v", err)
	}
	notConfined := func() error {
		for _, s := range []*agentsv1.AgentSession{parent, child} {
			cur := &agentsv1.AgentSession{}
			if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), cur); err != nil {
				return err
			}
			if testRunner.Running(s.UID) {
				return fmt.Errorf("the runner of %s runs in the unconfined pod", s.Name)
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil ||
				c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonConfinementNotKept {
				return fmt.Errorf("%s: WorkspaceReady = %+v, want False/%s", s.Name, c, agentsv1.ReasonConfinementNotKept)
			}
		}
		return nil
	}
	eventually(t, "both runners suspended", notConfined)
	consistently(t, 2*time.Second, "no runner while the policy cannot be written", notConfined)

	if err := testClient.Delete(t.Context(), binding); err != nil {
		t.Fatalf("delete the binding: %v", err)
	}
	waitPhase(t, child, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Child resumed after the interruption." {
			return fmt.Errorf("result %q", g.Status.Result)
		}
		return nil
	})
	waitPhase(t, parent, agentsv1.PhaseSucceeded, nil)
	if b, err := os.ReadFile(filepath.Join(dir, "child-runs.txt")); err != nil || string(b) != "started\n" {
		t.Errorf("child-runs.txt = %q, %v; want the child's command started once", b, err)
	}
}
