//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// editsPerChild is how many edits each of the two subagents makes to the shared file.
const editsPerChild = 10

// sharedEditsScript: the parent writes shared.txt with one line per edit, spawns two subagents
// in one round and waits for both; each child reads the file and edits its own lines, reading
// again before each edit. The children run at the same time in the same workspace.
func sharedEditsScript(parent string) string {
	var file, b strings.Builder
	for _, who := range []string{"a", "b"} {
		for i := 1; i <= editsPerChild; i++ {
			fmt.Fprintf(&file, "line %s%02d\\n", who, i)
		}
	}
	fmt.Fprintf(&b, `turns:
  - toolCalls:
      - name: write_file
        arguments: {file_path: shared.txt, content: "%s"}
  - toolCalls:
      - name: spawn_agent
        arguments: {task: "edit task a"}
      - name: spawn_agent
        arguments: {task: "edit task b"}
  - toolCalls:
      - name: wait
        arguments: {agent_id: %[2]s-sub-1}
      - name: wait
        arguments: {agent_id: %[2]s-sub-2}
  - text: "Both children finished."
agents:
`, file.String(), parent)
	for _, who := range []string{"a", "b"} {
		fmt.Fprintf(&b, "  - match: \"edit task %s\"\n    turns:\n", who)
		for i := 1; i <= editsPerChild; i++ {
			b.WriteString("      - toolCalls:\n          - name: read_file\n            arguments: {file_path: shared.txt}\n")
			fmt.Fprintf(&b, "      - toolCalls:\n          - name: edit_file\n            arguments: {file_path: shared.txt, old_string: \"line %[1]s%02[2]d\\n\", new_string: \"LINE %[1]s%02[2]d edited\\n\"}\n", who, i)
		}
		fmt.Fprintf(&b, "      - text: \"child %s done\"\n", who)
	}
	return b.String()
}

// Issue 19: concurrent edits of one file by two subagents sharing a workspace, through the real
// executor: every edit reported as a success is in the file; every other one says StaleFile.
var _ = Describe("concurrent edits from subagents", Ordered, ContinueOnFailure, Label("edits"), func() {
	op := withOperator("ao-edits", "ao-edits")

	It("never loses an edit it reported as done", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-edits")
		// Each child makes 2 calls per edit; children inherit the parent's turn limit.
		s := scriptedSession(ctx, ns, "edits", sharedEditsScript("edits"), func(s *agentsv1.AgentSession) {
			s.Spec.Limits.MaxTurns = 4 * editsPerChild
		})
		final := waitForOutcome(ctx, s, 5*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: final.Status.PodName, Container: "workspace",
			Command: []string{"cat", "/workspace/shared.txt"}})
		Expect(err).NotTo(HaveOccurred())
		content := res.Stdout

		succeeded, stale := 0, 0
		for _, child := range []string{"edits-sub-1", "edits-sub-2"} {
			c := &agentsv1.AgentSession{}
			Expect(f.Client.Get(ctx, objectKey(ns, child), c)).To(Succeed())
			evs, _ := sessionEvents(ctx, op, c)
			args := map[string]json.RawMessage{}
			for _, ev := range evs {
				if ev.Kind == loop.EventToolCallStart && ev.Data.ToolName == "edit_file" {
					args[ev.Data.CallID] = ev.Data.Arguments
				}
			}
			for _, ev := range evs {
				if ev.Kind != loop.EventToolCallEnd || ev.Data.ToolName != "edit_file" {
					continue
				}
				var a struct {
					New string `json:"new_string"`
				}
				Expect(json.Unmarshal(args[ev.Data.CallID], &a)).To(Succeed())
				if ev.Data.IsError {
					stale++
					Expect(ev.Data.Error+ev.Data.Output).To(ContainSubstring("StaleFile"), "a failed edit says why")
					continue
				}
				succeeded++
				Expect(content).To(ContainSubstring(a.New), "%s reported %q done; the file:\n%s", child, strings.TrimSpace(a.New), content)
			}
		}
		GinkgoWriter.Printf("edits: %d succeeded, %d refused as stale, of %d\n", succeeded, stale, 2*editsPerChild)
		Expect(succeeded+stale).To(Equal(2*editsPerChild), "every edit is accounted for")
		Expect(succeeded).To(BeNumerically(">", 0))
		Expect(strings.Count(content, " edited\n")).To(Equal(succeeded), "the file holds exactly the successful edits")
	}, SpecTimeout(7*time.Minute))
})
