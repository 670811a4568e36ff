//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// lifecycleScript is helloScript with a fifth turn that answers a follow-up.
const lifecycleScript = helloScript + `  - expect: {lastUserContains: "once more"}
    text: "Follow-up done."
`

// executorsIn counts the executor processes running in the workspace container of pod: one
// per open exec stream of the manager.
func executorsIn(ctx context.Context, ns, pod string) (int, error) {
	res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod, Container: "workspace",
		Command: []string{"sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -o '[/]agent/bin/executor-sidecar serve' | wc -l"}})
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(res.Stdout))
}

// appendMessage adds a follow-up message to the session as a user would (kubectl patch).
func appendMessage(ctx context.Context, s *agentsv1.AgentSession, name, text string) {
	GinkgoHelper()
	Eventually(func(ctx context.Context) error {
		got := &agentsv1.AgentSession{}
		if err := f.Client.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			return err
		}
		got.Spec.Messages = append(got.Spec.Messages, agentsv1.Message{Name: name, Kind: agentsv1.MessageFollowUp, Text: text})
		return f.Client.Update(ctx, got)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// A finished session stays finished and holds nothing: the deadline bounds working time, not
// the time it sits idle; its runner and exec stream end; its pod goes when the user says.
var _ = Describe("session lifecycle", Ordered, ContinueOnFailure, Label("lifecycle"), func() {
	op := withOperator("ao-lifecycle", "ao-lifecycle")

	It("stays Succeeded past its deadline with no stream open, then runs a message", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-idle")
		s := scriptedSession(ctx, ns, "idle", lifecycleScript, func(s *agentsv1.AgentSession) {
			s.Spec.Limits.Deadline = &metav1.Duration{Duration: 20 * time.Second}
		})
		done := waitForFinalPhase(ctx, s)
		Expect(done.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", done.Status.Error)
		Expect(done.Status.WorkingTime).NotTo(BeNil())
		GinkgoWriter.Printf("working time %s of a 20s deadline\n", done.Status.WorkingTime.Duration)

		// The idle session's runner ended and closed its exec stream: no executor runs in the pod.
		Eventually(func(ctx context.Context) (int, error) { return executorsIn(ctx, ns, done.Status.PodName) }).
			WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(BeZero(), "executor processes in the idle pod")

		// Its workspace NetworkPolicy, deleted while the pod is kept, is written again: the
		// manager watches the policies it owns (chart RBAC list/watch), not only ensures one
		// when a pod is created.
		policy := &networkingv1.NetworkPolicy{}
		Expect(f.Client.Get(ctx, objectKey(ns, s.Name+"-ws"), policy)).To(Succeed())
		Expect(f.Client.Delete(ctx, policy)).To(Succeed())
		Eventually(func(g Gomega, ctx context.Context) {
			got := &networkingv1.NetworkPolicy{}
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
			g.Expect(got.UID).NotTo(Equal(policy.UID), "still the deleted policy")
			g.Expect(got.Spec).To(Equal(policy.Spec))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(time.Second).Should(Succeed(), "the deleted workspace policy restored")

		// 40 s past the deadline's wall-clock time it is still Succeeded, with its pod.
		until := done.Status.StartTime.Add(20*time.Second + 40*time.Second)
		Consistently(func(g Gomega, ctx context.Context) {
			got := &agentsv1.AgentSession{}
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", got.Status.Error)
			g.Expect(f.Client.Get(ctx, objectKey(ns, done.Status.PodName), &corev1.Pod{})).To(Succeed(), "the pod is retained")
		}).WithContext(ctx).WithTimeout(time.Until(until)).WithPolling(2 * time.Second).Should(Succeed())

		followUpRuns(ctx, s)
	}, SpecTimeout(5*time.Minute))

	It("holds nothing for finished sessions: goroutines back to the idle baseline, no exec stream, none restored by a restart", func(ctx SpecContext) {
		const n = 20
		ns := f.SpecNamespace(ctx, "ao-finished")
		pods, err := managerPods(ctx, op.ns, "ao-lifecycle")
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1))
		manager := pods[0].Name
		before, err := scrapeManager(ctx, op.ns, manager)
		Expect(err).NotTo(HaveOccurred())
		baseGoroutines, baseRSS := before.sum("go_goroutines"), before.sum("process_resident_memory_bytes")

		sessions := make([]*agentsv1.AgentSession, n)
		for i := range sessions {
			// Small requests, as in the load spec: the idle pods stay (retainAfterSuccess) and
			// must all fit on the one 2-core node.
			sessions[i] = scriptedSession(ctx, ns, fmt.Sprintf("done-%02d", i), lifecycleScript, func(s *agentsv1.AgentSession) {
				s.Spec.Workspace.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("2m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}
			})
		}
		var finished []*agentsv1.AgentSession
		for _, s := range sessions {
			finished = append(finished, waitForOutcome(ctx, s, 4*time.Minute))
		}
		for _, s := range finished {
			Expect(s.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "%s: status.error=%q", s.Name, s.Status.Error)
		}
		// Every runner parked: no claim is held (a released claim's Lease stays, without a holder,
		// so its epochs only grow), and no executor runs in any of the pods.
		Eventually(func(g Gomega, ctx context.Context) {
			g.Expect(heldClaims(ctx, g, ns)).To(BeEmpty(), "session claims held")
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		// Status as the parked runners left it (the recorded change comes after Succeeded).
		for _, s := range finished {
			Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		}
		streams := 0
		for _, s := range finished {
			c, err := executorsIn(ctx, ns, s.Status.PodName)
			Expect(err).NotTo(HaveOccurred())
			streams += c
		}
		Expect(streams).To(BeZero(), "executor processes (open exec streams) in the %d idle pods", n)
		var after managerMetrics
		Eventually(func(g Gomega, ctx context.Context) {
			after, err = scrapeManager(ctx, op.ns, manager)
			g.Expect(err).NotTo(HaveOccurred())
			// Idle is idle: within a few goroutines of the baseline (informers and HTTP
			// keep-alives come and go), not one or more per session.
			g.Expect(after.sum("go_goroutines")).To(BeNumerically("<=", baseGoroutines+float64(n)/2),
				"goroutines %v, baseline %v", after.sum("go_goroutines"), baseGoroutines)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("idle manager after finished sessions", fmt.Sprintf(
			"%d finished sessions: goroutines %v -> %v, RSS %.0f MiB -> %.0f MiB", n,
			baseGoroutines, after.sum("go_goroutines"), baseRSS/(1<<20), after.sum("process_resident_memory_bytes")/(1<<20)))
		GinkgoWriter.Printf("%d finished sessions: goroutines %v -> %v, RSS %.0f MiB -> %.0f MiB\n", n,
			baseGoroutines, after.sum("go_goroutines"), baseRSS/(1<<20), after.sum("process_resident_memory_bytes")/(1<<20))

		// A manager restart restores none of them (no claim is taken, nothing changes) ...
		Expect(f.Clientset.CoreV1().Pods(op.ns).Delete(ctx, manager, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})).To(Succeed())
		Eventually(func(g Gomega, ctx context.Context) {
			pods, err := managerPods(ctx, op.ns, "ao-lifecycle")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Name).NotTo(Equal(manager))
			_, err = f.WaitForPodRunning(ctx, op.ns, pods[0].Name, 5*time.Second)
			g.Expect(err).NotTo(HaveOccurred())
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Consistently(func(g Gomega, ctx context.Context) {
			g.Expect(heldClaims(ctx, g, ns)).To(BeEmpty(), "a restart restored a finished session (it claimed it)")
			for _, s := range finished {
				got := &agentsv1.AgentSession{}
				g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
				g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded))
				g.Expect(got.Status.LastEventSequence).To(Equal(s.Status.LastEventSequence))
			}
		}).WithContext(ctx).WithTimeout(20 * time.Second).WithPolling(2 * time.Second).Should(Succeed())

		// ... and a message to one of them restores it and runs.
		one := finished[n/2]
		followUpRuns(ctx, one)
	}, SpecTimeout(10*time.Minute))

	It("releases the pod of an idle session when retainAfterSuccess passes and runs a message in a new one", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-release")
		s := scriptedSession(ctx, ns, "release", lifecycleScript, func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.RetainAfterSuccess = &metav1.Duration{Duration: 5 * time.Second}
		})
		done := waitForFinalPhase(ctx, s)
		Expect(done.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", done.Status.Error)
		oldPod := done.Status.PodName
		Eventually(func(g Gomega, ctx context.Context) {
			got := &agentsv1.AgentSession{}
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded))
			c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(agentsv1.ReasonWorkspaceReleased))
			g.Expect(c.Message).To(ContainSubstring("empty workspace"))
			err := f.Client.Get(ctx, objectKey(ns, oldPod), &corev1.Pod{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pod %s deleted (err %v)", oldPod, err)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		followUpRuns(ctx, s)
	}, SpecTimeout(6*time.Minute))
})

// followUpRuns sends lifecycleScript's follow-up to s and waits until it Succeeded with the
// follow-up's answer, delivered once.
func followUpRuns(ctx context.Context, s *agentsv1.AgentSession) {
	GinkgoHelper()
	appendMessage(ctx, s, "again", "Do it once more.")
	Eventually(func(g Gomega, ctx context.Context) {
		got := &agentsv1.AgentSession{}
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", got.Status.Error)
		g.Expect(got.Status.Result).To(Equal("Follow-up done."))
		g.Expect(got.Status.MessagesDelivered).To(ConsistOf("again"))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
}

func objectKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// heldClaims lists the session claims held in ns, as "<lease> by <holder>": a released claim's
// Lease stays, without a holder, so that its epochs only grow.
func heldClaims(ctx context.Context, g Gomega, ns string) []string {
	var leases coordinationv1.LeaseList
	g.Expect(f.Client.List(ctx, &leases, client.InNamespace(ns), client.HasLabels{claim.LabelClaim})).To(Succeed())
	var held []string
	for _, l := range leases.Items {
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
			held = append(held, l.Name+" by "+h)
		}
	}
	return held
}
