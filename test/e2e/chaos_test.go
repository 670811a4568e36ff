//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
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
	withOperator("ao-chaos", "ao-chaos")

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
})
