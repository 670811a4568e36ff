//go:build e2e

package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// longRelease is the Helm release of the long-session specs.
const longRelease = "ao-long"

// compactionScript drives a session whose long prompt overflows an 8000-token window after
// the first turn. The scripted client picks a conversation's turns by its first user message:
// the summary call's transcript ("Conversation transcript to summarise") gets the summary; the
// compacted conversation, which starts with "[Previous conversation summary: ...", continues
// at its second turn (it holds one assistant turn): a 30 s shell step (the manager is killed
// under it), a todo call, the answer. The window's budget is a quarter of it (the system
// prompt leaves less), so history above ~5600 characters compacts, and the small rounds that
// follow never do again: exactly one CONTEXT_COMPACTED.
const compactionScript = `turns:
  - text: "Step one."
    toolCalls:
      - name: shell
        arguments: {command: "echo one"}
agents:
  - match: "Conversation transcript to summarise"
    turns:
      - text: "The user gave a long task; step one ran."
  - match: "Previous conversation summary"
    turns:
      - text: "unused: the compacted conversation starts at its second turn"
      - text: "Step two."
        toolCalls:
          - name: shell
            arguments: {command: "sleep 30 && echo two"}
      - text: "Planning."
        toolCalls:
          - name: todo
            arguments: {todos: [{content: "run step one", status: completed}, {content: "run step two", status: completed}, {content: "report", status: in_progress}]}
      - text: "Done after compaction."
`

var _ = Describe("long sessions: compaction, resume after compaction, the plan", Ordered, ContinueOnFailure, Label("long-session"), func() {
	op := withOperator(longRelease, "ao-long")

	It("compacts once, survives a manager kill after the compaction without a second summary, and shows the plan", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-long-session")
		prompt := "Run the steps. " + strings.Repeat("This sentence only makes the task long. ", 150)
		s := scriptedSession(ctx, ns, "compact", compactionScript, func(s *agentsv1.AgentSession) {
			s.Spec.Prompt = prompt
			s.Spec.Model.ContextWindow = 8000
		})

		pods, err := managerPods(ctx, op.ns, longRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1), "one manager pod")
		old := pods[0]

		// Kill the manager after the compaction, while step two sleeps.
		running := &agentsv1.AgentSession{}
		Eventually(func(g Gomega, ctx context.Context) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), running)).To(Succeed())
			g.Expect(running.Status.Phase.IsFinal()).To(BeFalse(), "the session ended before the kill")
			g.Expect(running.Status.Context).NotTo(BeNil())
			g.Expect(running.Status.Context.Compactions).To(BeEquivalentTo(1))
			g.Expect(running.Status.ToolCalls).To(BeNumerically(">=", 1))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("killing manager pod %s at toolCalls=%d, context=%+v\n", old.Name, running.Status.ToolCalls, *running.Status.Context)
		killManager(ctx, op.ns, longRelease, old)

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("Done after compaction."))
		Expect(final.Status.Context).NotTo(BeNil())
		Expect(final.Status.Context.Window).To(BeEquivalentTo(8000))
		Expect(final.Status.Context.Compactions).To(BeEquivalentTo(1), "the resumed session made no second summary call")
		Expect(final.Status.Plan).To(Equal([]agentsv1.PlanStep{
			{Content: "run step one", Status: agentsv1.PlanStepCompleted},
			{Content: "run step two", Status: agentsv1.PlanStepCompleted},
			{Content: "report", Status: agentsv1.PlanStepInProgress},
		}))

		evs := completeJournal(ctx, op.plugin, final, "--operator-namespace", op.ns)
		var compactions, plans int
		for _, ev := range evs {
			switch ev.Kind {
			case loop.EventContextCompacted:
				compactions++
				Expect(ev.Data.Compaction.Dropped).To(BeFalse(), "the summary call answered")
				Expect(ev.Data.Compaction.Summary).To(ContainSubstring("The user gave a long task; step one ran."))
			case loop.EventPlanUpdated:
				plans++
			}
		}
		Expect(compactions).To(Equal(1), "one CONTEXT_COMPACTED in the journal: restore replayed it")
		Expect(plans).To(Equal(1))

		got, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "get", "-n", ns, s.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.ExitCode).To(Equal(0), "kubectl agent get: %s", got.Stderr)
		GinkgoWriter.Printf("kubectl agent get %s:\n%s\n", s.Name, got.Stdout)
		Expect(got.Stdout).To(ContainSubstring("Plan (2/3 done):\n  [x] run step one\n  [x] run step two\n  [>] report\n"))
		Expect(got.Stdout).To(ContainSubstring("compacted 1 times"))

		story, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "logs", "--max-output-lines", "0", "-n", ns, "--operator-namespace", op.ns, s.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(story.ExitCode).To(Equal(0), "kubectl agent logs: %s", story.Stderr)
		Expect(story.Stdout).To(ContainSubstring("⇢ context compacted"))
		Expect(story.Stdout).To(ContainSubstring("≡ Plan (2/3 done):"))
	}, SpecTimeout(10*time.Minute))
})
