//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// replicasRelease is the release of the replicas spec: three manager replicas sharding the
// sessions (issue 21) over one external NATS.
const replicasRelease = "ao-replicas"

// Issue 21: every replica drives a share of the sessions. One replica frozen with SIGSTOP (hung
// or partitioned) loses its membership and its claims; the others take its running sessions
// over and resume them from the journal; when it wakes up it runs nothing more for them.
var _ = Describe("three manager replicas", Ordered, ContinueOnFailure, Label("replicas", "chaos"), func() {
	op := &operator{}
	var natsNS, url string
	BeforeAll(func(ctx SpecContext) {
		natsNS = f.SpecNamespace(ctx, "ao-replicas-nats")
		url = startNATS(ctx, natsNS)
		op.ns = installOperator(ctx, replicasRelease, replicasRelease, "nats.mode=external", "nats.external.url="+url,
			"replicaCount=3", "sessionClaimDuration="+takeoverClaim.String(),
			"extraArgs={--replica-lease-duration="+takeoverClaim.String()+"}")
		bin, err := framework.BuildPlugin(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		op.plugin = bin
	}, NodeTimeout(12*time.Minute))
	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, ns := range []string{op.ns, natsNS} {
				if ns != "" {
					f.DumpNamespace(ctx, ns, GinkgoWriter)
				}
			}
		}
	})

	It("spreads sessions over the replicas and takes a frozen replica's sessions over: all Succeeded, no step run twice", func(ctx SpecContext) {
		const sessions, steps = 12, 6
		ns := f.SpecNamespace(ctx, "ao-replicas")
		var all []*agentsv1.AgentSession
		for i := range sessions {
			all = append(all, scriptedSession(ctx, ns, fmt.Sprintf("r%02d", i), stepsScript(steps, 2), func(s *agentsv1.AgentSession) {
				s.Spec.Limits.MaxTurns = 2 * steps
			}))
		}
		// Every session is driven (an owner, a tool call made); count them per replica.
		byPod := map[string][]*agentsv1.AgentSession{}
		Eventually(func(g Gomega, ctx context.Context) {
			clear(byPod)
			for _, s := range all {
				got := &agentsv1.AgentSession{}
				g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
				g.Expect(got.Status.Owner).NotTo(BeEmpty(), "owner of %s", s.Name)
				g.Expect(got.Status.ToolCalls).To(BeNumerically(">", 0), "tool calls of %s", s.Name)
				pod := got.Status.Owner[strings.LastIndex(got.Status.Owner, "/")+1:]
				byPod[pod] = append(byPod[pod], got)
			}
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
		spread := map[string]int{}
		for pod, ss := range byPod {
			spread[pod] = len(ss)
		}
		GinkgoWriter.Printf("sessions per replica: %v\n", spread)
		Expect(len(byPod)).To(BeNumerically(">=", 2), "sessions spread over the replicas: %v", spread)

		// Freeze the busiest replica among those with unfinished sessions.
		var victim string
		for pod, ss := range byPod {
			if len(ss) > len(byPod[victim]) && slices.ContainsFunc(ss, func(s *agentsv1.AgentSession) bool { return !s.Status.Phase.IsFinal() }) {
				victim = pod
			}
		}
		Expect(victim).NotTo(BeEmpty())
		pids := podPIDs(victim)
		Expect(pids).NotTo(BeEmpty(), "the manager process of %s", victim)
		cont := freeze(pids)
		frozenAt := time.Now()
		GinkgoWriter.Printf("froze replica %s (pids %v) driving %d sessions\n", victim, pids, len(byPod[victim]))

		// Each of its unfinished sessions is claimed by another replica.
		var takeovers []time.Duration
		for _, s := range byPod[victim] {
			if s.Status.Phase.IsFinal() {
				continue
			}
			lease := &coordinationv1.Lease{}
			key := client.ObjectKey{Namespace: ns, Name: claim.Name(s.UID)}
			Eventually(func(g Gomega, ctx context.Context) {
				g.Expect(f.Client.Get(ctx, key, lease)).To(Succeed())
				holder := ptr.Deref(lease.Spec.HolderIdentity, "")
				g.Expect(holder).NotTo(BeEmpty())
				g.Expect(holder).NotTo(HaveSuffix("/"+victim), "%s still claimed by the frozen replica", s.Name)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
			takeovers = append(takeovers, lease.Spec.AcquireTime.Sub(frozenAt))
		}
		slices.Sort(takeovers)
		if len(takeovers) > 0 {
			GinkgoWriter.Printf("takeover after the freeze: p50 %s, max %s (%d sessions)\n",
				takeovers[len(takeovers)/2].Round(time.Millisecond), takeovers[len(takeovers)-1].Round(time.Millisecond), len(takeovers))
		}
		// The frozen replica wakes up while they run elsewhere.
		cont()

		for _, s := range all {
			final := waitForOutcome(ctx, s, 4*time.Minute)
			Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "%s: status.error=%q", s.Name, final.Status.Error)
			evs := completeJournal(ctx, op.plugin, final, "--nats-url", url)
			expectStepsOnce(ctx, evs, ns, final.Status.PodName, steps)
		}
	}, SpecTimeout(12*time.Minute))
})

// podPIDs returns the host processes of the manager in pod (its environment names the pod).
func podPIDs(pod string) []int {
	GinkgoHelper()
	want := []byte("POD_NAME=" + pod + "\x00")
	var pids []int
	for _, pid := range hostPIDs() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err == nil && bytes.Contains(env, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}
