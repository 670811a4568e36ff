package agentsession

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// TestSubagentRunsAsAChildSessionInTheParentsWorkspace: the parent's
// spawn_agent creates a child AgentSession (ownerReference, parentRef,
// depth 1) that runs in the parent's pod, and wait returns its result.
func TestSubagentRunsAsAChildSessionInTheParentsWorkspace(t *testing.T) {
	ns := newNamespace(t)
	parent := uniqueName("lead")
	child := parent + "-sub-1"
	script := fmt.Sprintf(`turns:
  - text: "Delegating the tests."
    toolCalls:
      - name: spawn_agent
        arguments: {task: "write tests for hello.py", working_dir: "tests"}
  - toolCalls:
      - name: wait
        arguments: {agent_id: %q}
  - expect: {lastToolResultContains: "Tests written."}
    text: "All done."
agents:
  - match: "write tests"
    turns:
      - toolCalls:
          - name: write_file
            arguments: {file_path: test_hello.py, content: "assert True\n"}
      - text: "Tests written."
`, child)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns}, Data: map[string]string{"script.yaml": script}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: parent, Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Write hello.py and get tests written",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "team"}},
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if len(g.Status.Children) != 1 || g.Status.Children[0].Phase != agentsv1.PhaseSucceeded {
			return fmt.Errorf("children %+v", g.Status.Children)
		}
		return nil
	})
	if got.Status.Result != "All done." || got.Status.Children[0].Name != child {
		t.Errorf("result %q children %+v", got.Status.Result, got.Status.Children)
	}

	c := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: child}, c); err != nil {
		t.Fatalf("get child: %v", err)
	}
	if !metav1.IsControlledBy(c, got) || c.Spec.ParentRef == nil || c.Spec.ParentRef.UID != string(got.UID) ||
		c.Spec.Depth == nil || *c.Spec.Depth != 1 || c.Status.PodName != parent+"-ws" {
		t.Errorf("child = owner %v parentRef %+v depth %v pod %q", c.OwnerReferences, c.Spec.ParentRef, c.Spec.Depth, c.Status.PodName)
	}
	pods := &corev1.PodList{}
	if err := testClient.List(t.Context(), pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 1 {
		t.Errorf("pods in the namespace: %d (%v); a shared child must not get its own", len(pods.Items), err)
	}
	dir, _ := workspaces.dir(got)
	if data, err := os.ReadFile(filepath.Join(dir, "tests", "test_hello.py")); err != nil || string(data) != "assert True\n" {
		t.Errorf("the child's file in the parent's workspace: %q, %v", data, err)
	}
}
