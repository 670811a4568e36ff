package agentsession

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	s := scriptedParent(t, ns, parent, script, nil)
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

// scriptedParent creates a ConfigMap holding script and a top-level session
// replaying it (mutate adjusts its spec), and marks its pod Ready.
func scriptedParent(t *testing.T, ns, name, script string, mutate func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-script", Namespace: ns}, Data: map[string]string{"script.yaml": script}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Lead the work of the subagents",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm.Name}},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, s))
	return s
}

// getSession reads the session ns/name from the API server.
func getSession(t *testing.T, ns, name string) *agentsv1.AgentSession {
	t.Helper()
	s := &agentsv1.AgentSession{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatalf("get session %s: %v", name, err)
	}
	return s
}

// waitForFile is a shell command that prints found once every file exists,
// polling for up to ten seconds (the default command timeout).
func waitForFile(files ...string) string {
	test := ""
	for _, f := range files {
		test += fmt.Sprintf("[ -f %s ] && ", f)
	}
	return fmt.Sprintf("for i in $(seq 200); do %secho found && exit 0; sleep 0.05; done; exit 1", test)
}

// TestSubagentsRunConcurrentlyAndTheParentReadsEachResult: the parent spawns
// three children and waits for each; every child only finishes once all
// three have started (a barrier in the shared workspace), so they must run
// concurrently, and the parent's script checks each child's answer.
func TestSubagentsRunConcurrentlyAndTheParentReadsEachResult(t *testing.T) {
	ns := newNamespace(t)
	parent := uniqueName("fan")
	letters := []string{"A", "B", "C"}
	var script, agents strings.Builder
	script.WriteString("turns:\n")
	for i, l := range letters {
		if i > 0 {
			fmt.Fprintf(&script, "  - expect: {lastToolResultContains: %q}\n    toolCalls:\n", fmt.Sprintf("%s-sub-%d", parent, i))
		} else {
			script.WriteString("  - toolCalls:\n")
		}
		fmt.Fprintf(&script, "      - name: spawn_agent\n        arguments: {task: \"barrier task %s\"}\n    usage: {inputTokens: 10, outputTokens: 1}\n", l)
		fmt.Fprintf(&agents, `  - match: "barrier task %[1]s"
    turns:
      - usage: {inputTokens: 100, outputTokens: 10}
        toolCalls:
          - name: shell
            arguments: {command: "touch ready-%[1]s && %[2]s"}
      - expect: {lastToolResultContains: "found"}
        usage: {inputTokens: 100, outputTokens: 10}
        text: "child %[1]s saw all three running"
`, l, strings.ReplaceAll(waitForFile("ready-A", "ready-B", "ready-C"), `"`, `\"`))
	}
	for i := range letters {
		if i > 0 {
			fmt.Fprintf(&script, "  - expect: {lastToolResultContains: \"child %s saw all three running\"}\n", letters[i-1])
		} else {
			fmt.Fprintf(&script, "  - expect: {lastToolResultContains: %q}\n", fmt.Sprintf("%s-sub-%d", parent, len(letters)))
		}
		fmt.Fprintf(&script, "    toolCalls:\n      - name: wait\n        arguments: {agent_id: %s-sub-%d}\n", parent, i+1)
	}
	script.WriteString("  - expect: {lastToolResultContains: \"child C saw all three running\"}\n    text: \"All three children finished.\"\n")
	s := scriptedParent(t, ns, parent, script.String()+"agents:\n"+agents.String(), nil)

	got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if len(g.Status.Children) != 3 {
			return fmt.Errorf("children %+v", g.Status.Children)
		}
		for _, c := range g.Status.Children {
			if c.Phase != agentsv1.PhaseSucceeded {
				return fmt.Errorf("children %+v", g.Status.Children)
			}
		}
		return nil
	})
	if got.Status.Result != "All three children finished." {
		t.Errorf("parent result %q (error %q)", got.Status.Result, got.Status.Error)
	}
	for i, l := range letters {
		c := getSession(t, ns, fmt.Sprintf("%s-sub-%d", parent, i+1))
		if want := "child " + l + " saw all three running"; c.Status.Result != want {
			t.Errorf("%s result %q, want %q", c.Name, c.Status.Result, want)
		}
		if c.Status.Usage.Total != 220 {
			t.Errorf("%s usage %+v, want a total of 220", c.Name, c.Status.Usage)
		}
	}
	// Token usage rolls up the tree: the parent's treeTokens is its own total plus
	// each child's (the children have none of their own).
	eventually(t, "tree tokens rolled up", func() error {
		g := getSession(t, ns, parent)
		if want := g.Status.Usage.Total + 3*220; g.Status.TreeTokens != want {
			return fmt.Errorf("treeTokens %d (children %+v), want %d", g.Status.TreeTokens, g.Status.Children, want)
		}
		return nil
	})
}

// TestSubagentLimitsAreToolResults: beyond spec.subagents.maxChildren the
// parent's spawn_agent fails, and a child at maxDepth cannot spawn; both
// are tool results the model reads (the scripts expect them), not failures.
func TestSubagentLimitsAreToolResults(t *testing.T) {
	ns := newNamespace(t)
	parent := uniqueName("limits")
	script := fmt.Sprintf(`turns:
  - toolCalls:
      - name: spawn_agent
        arguments: {task: "blocked task"}
  - toolCalls:
      - name: spawn_agent
        arguments: {task: "one too many"}
  - expect: {lastToolResultContains: "spec.subagents.maxChildren is 1"}
    toolCalls:
      - name: write_file
        arguments: {file_path: release, content: "go"}
  - toolCalls:
      - name: wait
        arguments: {agent_id: %[1]s-sub-1}
  - expect: {lastToolResultContains: "the child could not spawn"}
    text: "Both limits held."
agents:
  - match: "blocked task"
    turns:
      - toolCalls:
          - name: spawn_agent
            arguments: {task: "grandchild"}
      - expect: {lastToolResultContains: "depth limit reached"}
        toolCalls:
          - name: shell
            arguments: {command: %[2]q}
      - expect: {lastToolResultContains: "found"}
        text: "the child could not spawn"
`, parent, waitForFile("release"))
	s := scriptedParent(t, ns, parent, script, func(s *agentsv1.AgentSession) {
		s.Spec.Subagents.MaxChildren = ptr.To[int32](1)
	})
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if got.Status.Result != "Both limits held." || len(got.Status.Children) != 1 {
		t.Errorf("result %q children %+v", got.Status.Result, got.Status.Children)
	}
}

// blockingParent starts a parent whose only child runs a command that never
// finishes until the session is stopped, and returns both once the child runs.
func blockingParent(t *testing.T, prefix string) (*agentsv1.AgentSession, *agentsv1.AgentSession) {
	t.Helper()
	ns := newNamespace(t)
	name := uniqueName(prefix)
	script := fmt.Sprintf(`turns:
  - toolCalls:
      - name: spawn_agent
        arguments: {task: "endless task"}
  - toolCalls:
      - name: wait
        arguments: {agent_id: %s-sub-1}
  - text: "unreachable"
agents:
  - match: "endless task"
    turns:
      - toolCalls:
          - name: shell
            arguments: {command: "tail -f /dev/null", timeout_ms: 600000}
      - text: "unreachable"
`, name)
	scriptedParent(t, ns, name, script, nil)
	child := waitPhase(t, &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-sub-1"}}, agentsv1.PhaseRunning, nil)
	return getSession(t, ns, name), child
}

// TestSubagentsAreDeletedWithTheirParent: children carry a controller
// ownerReference with blockOwnerDeletion, so the garbage collector deletes
// them with their parent (envtest runs no garbage collector: the test
// deletes the child as it would, after the parent is gone), and the
// finalizers stop both runners.
func TestSubagentsAreDeletedWithTheirParent(t *testing.T) {
	parent, child := blockingParent(t, "doomed")
	ref := metav1.GetControllerOf(child)
	if ref == nil || ref.UID != parent.UID || ref.Kind != "AgentSession" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Fatalf("child controller reference %+v, want the parent with blockOwnerDeletion", ref)
	}
	if err := testClient.Delete(t.Context(), parent); err != nil {
		t.Fatal(err)
	}
	waitGone(t, parent)
	if err := testClient.Delete(t.Context(), child); err != nil { // the garbage collector's part
		t.Fatal(err)
	}
	waitGone(t, child)
}

// TestSubagentsAreAbortedWithTheirParent: spec.abort on the parent reaches
// every descendant that still runs.
func TestSubagentsAreAbortedWithTheirParent(t *testing.T) {
	parent, child := blockingParent(t, "aborted")
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"abort":true}}`))
	if err := testClient.Patch(t.Context(), parent, patch); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, parent, agentsv1.PhaseAborted, nil)
	got := waitPhase(t, child, agentsv1.PhaseAborted, nil)
	if !got.Spec.Abort {
		t.Error("the child's spec.abort is not set")
	}
}

// waitGone waits until s no longer exists (its finalizer was removed).
func waitGone(t *testing.T, s *agentsv1.AgentSession) {
	t.Helper()
	eventually(t, "session "+s.Name+" deleted", func() error {
		err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), &agentsv1.AgentSession{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}
