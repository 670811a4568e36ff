//go:build e2e

package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/builtin"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// forkBombScript runs the classic bash fork bomb twice, then checks that the workspace can still
// start a process. The first bomb outlives its leader, which returns at once: the executor kills
// its process group when the output pipes are still held a second later, however far the bomb
// got by then (a slow machine may not reach the pids limit in that second). The second bomb's
// leader waits, with builtins only (a fork would fail), until the bomb has met the pod's pids
// limit, prints the bomb's own message, and holds the limit five seconds more before it returns;
// the executor serving the stream shares that limit and must live through it. Waiting for the
// limit instead of a fixed time keeps the spec about the limit, not the machine's speed: on a
// loaded 2-core CI machine the bomb took more than 8 s to reach it (a run failed that way), and
// 7 s with six busy loops beside it on an idle one.
const forkBombScript = `turns:
  - toolCalls:
      - name: shell
        arguments:
          command: ':(){ :|:& };:'
          timeout_ms: 20000
  - expect: {lastToolResultContains: "Exit code: 0"}
    toolCalls:
      - name: shell
        arguments:
          command: |-
            mkfifo .tick && exec 3<>.tick
            { :(){ :|:& };: ; } 2>.bomb
            until mapfile -t l <.bomb; [[ "${l[*]}" == *"Resource temporarily unavailable"* ]]; do read -t 0.2 -u 3; done
            printf 'after %ss the bomb says: %s\n' "$SECONDS" "${l[0]}"
            read -t 5 -u 3
            exit 0
          timeout_ms: 120000
  - expect: {lastToolResultContains: "Resource temporarily unavailable"}
    toolCalls:
      - name: shell
        arguments: {command: "rm -f .tick .bomb && echo survived"}
  - expect: {lastToolResultContains: "survived"}
    text: "contained"
`

// memoryHogScript allocates (and touches) 1 GiB, far above the session's memory limit.
const memoryHogScript = `turns:
  - toolCalls:
      - name: shell
        arguments:
          command: |-
            python3 -c 'b = b"x" * (1 << 30); print(len(b))'
          timeout_ms: 60000
  - expect: {lastToolResultContains: "Exit code: 137"}
    toolCalls:
      - name: shell
        arguments: {command: "echo survived"}
  - expect: {lastToolResultContains: "survived"}
    text: "contained"
`

// cgroupV2 reports whether the cluster's node runs pods on cgroup v2, where the kernel kills
// the whole container on OOM (the kubelet sets memory.oom.group), rather than the one process.
func cgroupV2(ctx context.Context, ns string) bool {
	GinkgoHelper()
	pod := framework.WorkspacePod(ns, "cgroup-probe")
	Expect(f.Client.Create(ctx, pod)).To(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, pod.Name, 2*time.Minute)
	Expect(err).NotTo(HaveOccurred())
	res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod.Name, Command: []string{"stat", "-fc", "%T", "/sys/fs/cgroup"}})
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
	Expect(f.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	return strings.TrimSpace(res.Stdout) == "cgroup2fs"
}

// Code the model wrote runs in the workspace; these specs check that the pod's limits, not the
// node, absorb it, and that the session reports it in a way the model and the user can act on.
var _ = Describe("containment of workspace code", Ordered, ContinueOnFailure, Label("chaos"), func() {
	op := withOperator("ao-contain", "ao-contain")

	It("contains a fork bomb in the pod's pids limit, and the session goes on", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-contain")
		s := scriptedSession(ctx, ns, "forkbomb", forkBombScript)

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded),
			"the bomb hit the pids limit, was killed with its process group, and the next command ran: status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("contained"))

		// The node and the operator were not touched.
		node := &corev1.NodeList{}
		Expect(f.Client.List(ctx, node)).To(Succeed())
		for _, n := range node.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					Expect(c.Status).To(Equal(corev1.ConditionTrue), "node %s Ready", n.Name)
				}
			}
		}
		pods, err := managerPods(ctx, op.ns, "ao-contain")
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).NotTo(BeEmpty())
		for _, p := range pods {
			for _, cs := range p.Status.ContainerStatuses {
				Expect(cs.RestartCount).To(BeZero(), "manager container %s restarted", cs.Name)
			}
		}
	}, SpecTimeout(6*time.Minute))

	It("contains a memory hog in the workspace memory limit and says so", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-contain")
		v2 := cgroupV2(ctx, ns)
		s := scriptedSession(ctx, ns, "memhog", memoryHogScript, func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			}
		})

		final := waitForOutcome(ctx, s, 3*time.Minute)
		if v2 {
			// cgroup v2: the kernel kills the whole container; the session fails and says why.
			Expect(final.Status.Phase).To(Equal(agentsv1.PhaseFailed))
			c := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionCompleted)
			Expect(c).NotTo(BeNil())
			Expect(c.Reason).To(Equal(agentsv1.ReasonWorkspaceOOMKilled), "condition %s: %s", c.Reason, c.Message)
			Expect(c.Message).To(ContainSubstring("memory limit (256Mi)"))
			return
		}
		// cgroup v1: the kernel kills the largest process, the hog; the model reads why.
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("contained"))
		out, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "logs", "--raw", "-n", ns, "--operator-namespace", op.ns, s.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(out.ExitCode).To(Equal(0), "stderr: %s", out.Stderr)
		Expect(out.Stdout).To(ContainSubstring(builtin.KilledMessage), "the hog's result explains the SIGKILL")
	}, SpecTimeout(5*time.Minute))
})
