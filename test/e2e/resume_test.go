//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// resumeRelease is the Helm release of the resume specs. Every cluster-scoped object of the
// chart (ClusterRoles, ClusterRoleBinding) is named after the release, so it never collides
// with the releases of the other specs; the CRD comes from the chart's crds/ directory,
// which Helm installs only when it is missing and never deletes.
const resumeRelease = "ao-resume"

// resumeSteps is the number of shell steps of resumeScript.
const resumeSteps = 6

// resumeScript is the script of the manager-kill and API-server specs: resumeSteps steps of
// 2 s each.
func resumeScript() string { return stepsScript(resumeSteps, 2) }

// stepsScript runs n shell steps, one per turn. Step i touches started<i> (so a spec knows the
// command runs), sleeps the given seconds (so something can go away under it), appends its
// name to steps.log (so a spec can count how often each ran, see stepsRun) and prints
// "finished step<i>"; the last turn says "All steps done.".
func stepsScript(n, sleepSeconds int) string {
	var b strings.Builder
	b.WriteString("turns:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `  - text: "Step %d."
    toolCalls:
      - name: shell
        arguments: {command: "touch started%d && sleep %d && echo step%d >> steps.log && echo finished step%d"}
`, i, i, sleepSeconds, i, i)
	}
	b.WriteString("  - text: \"All steps done.\"\n")
	return b.String()
}

// managerPods lists the manager pods of release that are not being deleted.
func managerPods(ctx context.Context, ns, release string) ([]corev1.Pod, error) {
	pods, err := f.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=manager,app.kubernetes.io/instance=" + release,
	})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// waitForOutcome polls the session until its phase is final, like waitForFinalPhase but with
// room for a manager restart (leader election waits for the dead leader's lease to expire).
func waitForOutcome(ctx context.Context, s *agentsv1.AgentSession, timeout time.Duration) *agentsv1.AgentSession {
	GinkgoHelper()
	got := &agentsv1.AgentSession{}
	Eventually(func(g Gomega, ctx context.Context) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		g.Expect(got.Status.Phase.IsFinal()).To(BeTrue(), "phase %q", got.Status.Phase)
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(500 * time.Millisecond).Should(Succeed())
	GinkgoWriter.Printf("session %s/%s: phase=%s turns=%d toolCalls=%d error=%q result=%q\n",
		got.Namespace, got.Name, got.Status.Phase, got.Status.Turns, got.Status.ToolCalls, got.Status.Error, got.Status.Result)
	return got
}

// parseRawEvents decodes the output of `kubectl agent logs --raw` (one event per line).
func parseRawEvents(out string) []loop.Event {
	GinkgoHelper()
	var evs []loop.Event
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var ev loop.Event
		Expect(json.Unmarshal([]byte(line), &ev)).To(Succeed(), "event line %q", line)
		evs = append(evs, ev)
	}
	return evs
}

// completeJournal reads the journal of the finished session with `kubectl agent logs --raw`
// (extra flags say where NATS is) and checks that nothing is missing: seq 1, 2, 3, ... without
// a gap or a duplicate, ending with the session's end, holding every event the status counted.
func completeJournal(ctx context.Context, plugin string, final *agentsv1.AgentSession, flags ...string) []loop.Event {
	GinkgoHelper()
	args := append([]string{"logs", "--raw", "-n", final.Namespace}, flags...)
	raw, err := framework.RunPlugin(ctx, plugin, kubeconfig(), append(args, final.Name)...)
	Expect(err).NotTo(HaveOccurred())
	Expect(raw.ExitCode).To(Equal(0), "kubectl agent logs --raw: %s", raw.Stderr)
	evs := parseRawEvents(raw.Stdout)
	Expect(evs).NotTo(BeEmpty())
	Expect(events.CheckSequence(evs)).To(Succeed())
	Expect(evs[0].SessionID).To(Equal(string(final.UID)))
	last := evs[len(evs)-1]
	if last.Kind == loop.EventChangesRecorded && len(evs) > 1 {
		last = evs[len(evs)-2] // the change is recorded after the input's end (issue 17)
	}
	Expect(last.Kind).To(Equal(loop.EventSessionEnd), "the journal ends with the session's end (and its recorded change)")
	Expect(last.Data.State).To(Equal(string(loop.StateIdle)))
	Expect(evs[len(evs)-1].Seq).To(BeNumerically(">=", final.Status.LastEventSequence), "the journal holds every event the status counted")
	return evs
}

// killManager deletes the manager pod old of release at once and returns its replacement once
// it runs.
func killManager(ctx context.Context, ns, release string, old corev1.Pod) corev1.Pod {
	GinkgoHelper()
	Expect(f.Clientset.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})).To(Succeed())
	var fresh corev1.Pod
	Eventually(func(g Gomega, ctx context.Context) {
		pods, err := managerPods(ctx, ns, release)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].UID).NotTo(Equal(old.UID), "a new manager pod")
		fresh = pods[0]
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, fresh.Name, 3*time.Minute)
	Expect(err).NotTo(HaveOccurred(), "the new manager pod becomes ready")
	return fresh
}

// midSession waits until the resumeScript session s has made a tool call and is not finished,
// and returns it: the moment to pull something away from under it.
func midSession(ctx context.Context, s *agentsv1.AgentSession) *agentsv1.AgentSession {
	GinkgoHelper()
	running := &agentsv1.AgentSession{}
	Eventually(func(g Gomega, ctx context.Context) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), running)).To(Succeed())
		g.Expect(running.Status.Phase.IsFinal()).To(BeFalse(), "the session ended before the fault")
		g.Expect(running.Status.ToolCalls).To(BeNumerically(">", 0))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	Expect(running.Status.ToolCalls).To(BeNumerically("<", resumeSteps), "the session is in the middle")
	return running
}

// stepsRun counts how often each step appended its name to /workspace/steps.log in the pod.
func stepsRun(ctx context.Context, ns, pod string) map[string]int {
	GinkgoHelper()
	res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod, Container: "workspace",
		Command: []string{"sh", "-c", "cat /workspace/steps.log 2>/dev/null || true"}})
	Expect(err).NotTo(HaveOccurred())
	ran := map[string]int{}
	for _, line := range strings.Fields(res.Stdout) {
		ran[line]++
	}
	return ran
}

// stepOfCall returns the step (1..steps) a TOOL_CALL_START runs, found by the `echo stepN `
// in its arguments, or 0.
func stepOfCall(ev loop.Event, steps int) int {
	for i := 1; i <= steps; i++ {
		// Match without shell operators: JSON may escape them (\u003e, \u0026).
		if strings.Contains(string(ev.Data.Arguments), fmt.Sprintf("echo step%d ", i)) {
			return i
		}
	}
	return 0
}

// toolTimeline lists the events of evs that say which calls were made and run (assistant turns,
// tool call starts and ends), one per line with their sequence and time, for a failure message.
func toolTimeline(evs []loop.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		switch ev.Kind {
		case loop.EventAssistantTextEnd, loop.EventToolCallStart, loop.EventToolCallEnd, loop.EventSessionStart, loop.EventSessionEnd:
			call := ev.Data.CallID
			if ev.Data.Assistant != nil {
				for _, c := range ev.Data.Assistant.ToolCalls() {
					call += c.ID + " "
				}
			}
			fmt.Fprintf(&b, "  %d %s %s call=%s args=%s error=%.240q\n", ev.Seq, ev.Time.Format("15:04:05.000"), ev.Kind, call, ev.Data.Arguments, ev.Data.Error)
		}
	}
	return b.String()
}

// expectStepsOnce checks the journal evs of a stepsScript session of n steps against the
// steps.log of its pod: every TOOL_CALL_START has exactly one TOOL_CALL_END; each step ran
// once, or never (or once, cut off by a fault) with the interrupted error result.
func expectStepsOnce(ctx context.Context, evs []loop.Event, ns, pod string, n int) {
	GinkgoHelper()
	ran := stepsRun(ctx, ns, pod)
	stepOf := map[string]string{}
	ends := map[string][]loop.Event{}
	var interrupted int
	for _, ev := range evs {
		switch ev.Kind {
		case loop.EventToolCallStart:
			Expect(stepOf).NotTo(HaveKey(ev.Data.CallID), "call %s started twice", ev.Data.CallID)
			if i := stepOfCall(ev, n); i > 0 {
				stepOf[ev.Data.CallID] = fmt.Sprintf("step%d", i)
			}
		case loop.EventToolCallEnd:
			ends[ev.Data.CallID] = append(ends[ev.Data.CallID], ev)
		}
	}
	Expect(stepOf).To(HaveLen(n), "one tool call per step; the journal's turns and tool calls:\n%s", toolTimeline(evs))
	for callID, step := range stepOf {
		Expect(ends[callID]).To(HaveLen(1), "TOOL_CALL_END events of %s (%s)", callID, step)
		end := ends[callID][0]
		if end.Data.Error == loop.InterruptedResult {
			interrupted++
			Expect(ran[step]).To(BeNumerically("<=", 1), "%s was interrupted and ran %d times", step, ran[step])
			continue
		}
		Expect(ran[step]).To(Equal(1), "%s ran %d times", step, ran[step])
		Expect(end.Data.Output).To(ContainSubstring("finished "+step), "result of %s", step)
	}
	GinkgoWriter.Printf("steps run: %v; interrupted calls: %d\n", ran, interrupted)
}

// The manager runs every session in-process; its journal on NATS JetStream is what lets a new
// manager continue a session after the old one died without running a tool twice.
var _ = Describe("session resume after the manager pod is killed", Ordered, ContinueOnFailure, Label("resume"), func() {
	op := withOperator(resumeRelease, "ao-resume")

	It("resumes a running session in the new manager pod: the right result, a gap-free journal, no tool call run twice", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-resume-session")
		s := scriptedSession(ctx, ns, "resume", resumeScript())

		pods, err := managerPods(ctx, op.ns, resumeRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1), "one manager pod")
		old := pods[0]

		// Kill the manager in the middle of the session: some tool calls done, more to come.
		running := midSession(ctx, s)
		GinkgoWriter.Printf("killing manager pod %s at toolCalls=%d, lastEventSequence=%d\n", old.Name, running.Status.ToolCalls, running.Status.LastEventSequence)
		killManager(ctx, op.ns, resumeRelease, old)

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("All steps done."))
		Expect(final.Status.ToolCalls).To(BeEquivalentTo(resumeSteps))

		// The journal, read with the plugin through a port-forward to the new manager's
		// embedded NATS: seq 1, 2, 3, ... without a gap or a duplicate.
		evs := completeJournal(ctx, op.plugin, final, "--operator-namespace", op.ns)

		expectStepsOnce(ctx, evs, ns, final.Status.PodName, resumeSteps)

		// `kubectl agent logs` tells the whole story, rendered for people.
		story, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "logs", "--max-output-lines", "0", "-n", ns, "--operator-namespace", op.ns, s.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(story.ExitCode).To(Equal(0), "kubectl agent logs: %s", story.Stderr)
		GinkgoWriter.Printf("kubectl agent logs %s:\n%s\n", s.Name, story.Stdout)
		Expect(story.Stdout).To(ContainSubstring("▶ user: " + s.Spec.Prompt))
		for i := 1; i <= resumeSteps; i++ {
			Expect(story.Stdout).To(ContainSubstring(fmt.Sprintf("◆ assistant: Step %d.", i)))
			Expect(story.Stdout).To(ContainSubstring(fmt.Sprintf("echo step%d ", i)))
		}
		Expect(strings.Count(story.Stdout, "⚙ shell")).To(Equal(resumeSteps), "one tool call line per step")
		Expect(strings.Count(story.Stdout, "✓ shell")+strings.Count(story.Stdout, "✗ shell")).To(Equal(resumeSteps), "one result per step")
		Expect(story.Stdout).To(ContainSubstring("◆ assistant: All steps done."))
		Expect(story.Stdout).To(ContainSubstring("■ session ended (IDLE)"))
	}, SpecTimeout(10*time.Minute))
})
