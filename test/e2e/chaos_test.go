//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// blockedScript runs one command that never ends on its own.
const blockedScript = `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "touch waiting; sleep 600", timeout_ms: 900000}
  - text: "unreachable"
`

// waitForWorkspaceFile waits until the session has a pod and /workspace/name exists in it
// (the scripts touch a file to say that a command has started), and refreshes s.
func waitForWorkspaceFile(ctx context.Context, s *agentsv1.AgentSession, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega, ctx context.Context) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		g.Expect(s.Status.PodName).NotTo(BeEmpty())
		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: s.Namespace, Pod: s.Status.PodName,
			Command: []string{"test", "-f", "/workspace/" + name}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.ExitCode).To(Equal(0), "/workspace/%s exists", name)
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// Faults on the real cluster: what a session does when the ground goes away under it.
var _ = Describe("faults", Ordered, ContinueOnFailure, Label("chaos"), func() {
	op := withOperator("ao-chaos", "ao-chaos")

	It("fails a session on an emptyDir with WorkspaceLost when its pod is deleted mid-command", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-chaos")
		s := scriptedSession(ctx, ns, "lost", blockedScript)
		waitForWorkspaceFile(ctx, s, "waiting")

		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Status.PodName}}
		Expect(f.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())

		final := waitForOutcome(ctx, s, 2*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseFailed))
		ready := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionWorkspaceReady)
		Expect(ready).NotTo(BeNil())
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(agentsv1.ReasonWorkspaceLost), "condition %s: %s", ready.Reason, ready.Message)
		Expect(final.Status.Result).NotTo(ContainSubstring("unreachable"), "the model never got past the lost command")
	}, SpecTimeout(5*time.Minute))

	It("finishes a session across an API server restart, with a gap-free journal and no step run twice", func(ctx SpecContext) {
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		script := filepath.Join(root, "hack", "cluster.sh")
		local, err := exec.CommandContext(ctx, script, "kubeconfig").Output()
		Expect(err).NotTo(HaveOccurred())
		if strings.TrimSpace(string(local)) != kubeconfig() {
			Skip("the API server can only be restarted on the local cluster of hack/cluster.sh")
		}
		ns := f.SpecNamespace(ctx, "ao-chaos")
		s := scriptedSession(ctx, ns, "apiserver", resumeScript())

		running := midSession(ctx, s)
		before, err := managerPods(ctx, op.ns, "ao-chaos")
		Expect(err).NotTo(HaveOccurred())
		Expect(before).To(HaveLen(1))

		// 20 s down: longer than the manager's leader-election renew deadline (10 s).
		GinkgoWriter.Printf("stopping the API server for 20s at toolCalls=%d\n", running.Status.ToolCalls)
		out, err := exec.CommandContext(ctx, script, "restart-apiserver", "20").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "hack/cluster.sh restart-apiserver:\n%s", out)

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("All steps done."))
		Expect(final.Status.ToolCalls).To(BeEquivalentTo(resumeSteps))
		after, err := managerPods(ctx, op.ns, "ao-chaos")
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(HaveLen(1))
		var restarts int32
		for _, cs := range after[0].Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		GinkgoWriter.Printf("manager pod %s (was %s), container restarts %d\n", after[0].Name, before[0].Name, restarts)
		if restarts > 0 {
			tail := int64(40)
			prev, err := f.Clientset.CoreV1().Pods(op.ns).GetLogs(after[0].Name, &corev1.PodLogOptions{Previous: true, TailLines: &tail}).DoRaw(ctx)
			GinkgoWriter.Printf("previous manager container's log (err %v):\n%s\n", err, prev)
		}

		// The plugin reads the journal through a ready manager pod. A manager restarted by the
		// outage can finish the session before its first readiness probe has passed (the
		// kubelet probes every 10 s), so wait for the pod to be ready, as a user would retry.
		_, err = f.WaitForPodRunning(ctx, op.ns, after[0].Name, time.Minute)
		Expect(err).NotTo(HaveOccurred(), "the manager pod is ready again after the outage")
		evs := completeJournal(ctx, op.plugin, final, "--operator-namespace", op.ns)

		// A call cut by the outage ends with an error result the model reads; none runs twice.
		ran := stepsRun(ctx, ns, final.Status.PodName)
		failed := 0
		ends := map[string]int{}
		for _, ev := range evs {
			if ev.Kind != loop.EventToolCallEnd {
				continue
			}
			ends[ev.Data.CallID]++
			if ev.Data.Error != "" {
				failed++
			}
		}
		Expect(ends).To(HaveLen(resumeSteps))
		for id, n := range ends {
			Expect(n).To(Equal(1), "TOOL_CALL_END events of %s", id)
		}
		for i := 1; i <= resumeSteps; i++ {
			Expect(ran[fmt.Sprintf("step%d", i)]).To(BeNumerically("<=", 1), "step%d ran more than once", i)
		}
		Expect(ran).To(HaveKeyWithValue(fmt.Sprintf("step%d", resumeSteps), 1), "the last step ran after the API server came back")
		GinkgoWriter.Printf("steps run: %v; calls ended in an error: %d\n", ran, failed)
	}, SpecTimeout(8*time.Minute))
})
