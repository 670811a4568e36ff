package agentsession

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// policyScript tries a denied command, an "ask" command and an allowed one;
// each expect fails the (scripted) model call, and so the session, unless the
// previous tool result says what the policy decided.
const policyScript = `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "rm -rf keep"}
  - expect: {lastToolResultContains: "denied by policy: no recursive deletes in this repository"}
    toolCalls:
      - name: shell
        arguments: {command: "git push origin main"}
  - expect: {lastToolResultContains: "session is headless (ask = deny)"}
    toolCalls:
      - name: shell
        arguments: {command: "echo allowed > ran.txt"}
  - text: "Done."
`

// TestToolPolicyDeniesBeforeTheToolRuns: spec.tools.policy reaches the loop;
// a denied shell command never runs and the model reads the rule's reason as
// the tool result, ask is deny (sessions are headless), and other commands run.
func TestToolPolicyDeniesBeforeTheToolRuns(t *testing.T) {
	ns := newNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policy", Namespace: ns}, Data: map[string]string{"script.yaml": policyScript}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("policy"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Clean up and publish",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "policy"}},
			Tools: agentsv1.ToolsSpec{Policy: &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{
				{Tool: "shell", CommandPattern: "rm -rf *", Action: agentsv1.PolicyDeny, Reason: "no recursive deletes in this repository"},
				{Tool: "shell", CommandPattern: "git push*", Action: agentsv1.PolicyAsk},
			}}},
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	pod := getPod(t, s)
	dir, err := workspaces.dir(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	markPodReady(t, pod)
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if got.Status.Result != "Done." || got.Status.ToolCalls != 3 {
		t.Errorf("result %q after %d tool calls, want Done. after 3", got.Status.Result, got.Status.ToolCalls)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Errorf("the denied rm ran: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "ran.txt")); err != nil || string(data) != "allowed\n" {
		t.Errorf("the allowed command did not run: %q %v", data, err)
	}
}
