//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// claimSteps is how many shell steps the overlapping-installs session runs.
const claimSteps = 10

// Two installs of the chart with the same scope (both handle the suite's sessions): each
// session is driven by exactly one of them, the one holding its claim, and the other says so.
var _ = Describe("two installs with overlapping scope", Ordered, ContinueOnFailure, Label("claims"), func() {
	a := withOperator("ao-claims-a", "ao-claims-a")
	b := withOperator("ao-claims-b", "ao-claims-b")

	It("runs every step of a session exactly once, driven by one install, the other reporting it as owner", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-claims")
		s := scriptedSession(ctx, ns, "claimed", stepsScript(claimSteps, 1), func(s *agentsv1.AgentSession) {
			s.Spec.Limits.MaxTurns = 2 * claimSteps
		})
		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Owner).NotTo(BeEmpty(), "status.owner")
		owner, other := a, b
		if strings.HasPrefix(final.Status.Owner, b.ns+"/") {
			owner, other = b, a
		}
		Expect(final.Status.Owner).To(HavePrefix(owner.ns+"/"), "the owner is one of the two installs")
		GinkgoWriter.Printf("driven by %s; the other install is in %s\n", final.Status.Owner, other.ns)

		ran := stepsRun(ctx, ns, final.Status.PodName)
		for i := 1; i <= claimSteps; i++ {
			Expect(ran[fmt.Sprintf("step%d", i)]).To(Equal(1), "step%d ran %d times (all: %v)", i, ran[fmt.Sprintf("step%d", i)], ran)
		}
		evs := completeJournal(ctx, owner.plugin, final, "--operator-namespace", owner.ns)
		starts := map[string]int{}
		for _, ev := range evs {
			if ev.Kind == loop.EventToolCallStart {
				starts[ev.Data.CallID]++
			}
		}
		Expect(starts).To(HaveLen(claimSteps))
		for id, n := range starts {
			Expect(n).To(Equal(1), "TOOL_CALL_START of %s", id)
		}
		// The other install left it alone and said who drives it (an Event from its manager).
		Eventually(func(g Gomega, ctx context.Context) {
			var list corev1.EventList
			g.Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.InvolvedObject.Name == s.Name && e.Reason == "OwnedElsewhere" {
					notes = append(notes, e.Message)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring("Driven by operator instance " + final.Status.Owner)))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(6*time.Minute))
})

// takeoverClaim is the claim duration of the takeover spec's installs.
const takeoverClaim = 6 * time.Second

// Two installs of the same class sharing one external NATS (so either can resume a session from
// its journal). The install driving a session is frozen with SIGSTOP on the node, as a hung or
// partitioned manager is: the other takes the session over only after the claim expired,
// resumes it from the journal and finishes it. Then the frozen manager is resumed while the
// session still runs elsewhere: its stale runner's journal appends are fenced and the workspace
// refuses its calls, so no step runs twice.
var _ = Describe("an install frozen mid-session", Ordered, ContinueOnFailure, Label("claims", "chaos"), func() {
	a, b := &operator{}, &operator{}
	var natsNS, url string
	BeforeAll(func(ctx SpecContext) {
		if _, err := os.Stat("/proc/self/cmdline"); err != nil {
			Skip("the managers' processes are not visible from here (/proc)")
		}
		natsNS = f.SpecNamespace(ctx, "ao-takeover-nats")
		url = startNATS(ctx, natsNS)
		for _, p := range []struct {
			op      *operator
			release string
		}{{a, "ao-takeover-a"}, {b, "ao-takeover-b"}} {
			p.op.ns = installOperator(ctx, p.release, p.release, "nats.mode=external", "nats.external.url="+url,
				"sessionClaimDuration="+takeoverClaim.String())
		}
		bin, err := framework.BuildPlugin(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		a.plugin, b.plugin = bin, bin
	}, NodeTimeout(12*time.Minute))
	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, ns := range []string{a.ns, b.ns, natsNS} {
				if ns != "" {
					f.DumpNamespace(ctx, ns, GinkgoWriter)
				}
			}
		}
	})

	It("is taken over by the other install after the claim expires, resumed from the journal, no step run twice", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-takeover")
		s := scriptedSession(ctx, ns, "takeover", stepsScript(claimSteps, 2), func(s *agentsv1.AgentSession) {
			s.Spec.Limits.MaxTurns = 2 * claimSteps
		})
		running := midSession(ctx, s)
		Expect(running.Status.Owner).NotTo(BeEmpty(), "status.owner")
		frozen, other := a, b
		if strings.HasPrefix(running.Status.Owner, b.ns+"/") {
			frozen, other = b, a
		}
		pids := managerPIDs(frozen.ns)
		Expect(pids).NotTo(BeEmpty(), "the processes of the manager in %s", frozen.ns)
		cont := freeze(pids)
		frozenAt := time.Now()
		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: ns, Name: claim.Name(running.UID)}
		Expect(f.Client.Get(ctx, key, lease)).To(Succeed())
		lastRenew := lease.Spec.RenewTime.Time
		GinkgoWriter.Printf("froze %s (pids %v) at toolCalls=%d; its last renewal %s\n", running.Status.Owner, pids,
			running.Status.ToolCalls, lastRenew.Format(time.RFC3339Nano))

		// The other install takes the claim, and only once it expired.
		Eventually(func(g Gomega, ctx context.Context) {
			g.Expect(f.Client.Get(ctx, key, lease)).To(Succeed())
			g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).To(HavePrefix(other.ns + "/"))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(lease.Spec.AcquireTime.Time).To(BeTemporally(">=", lastRenew.Add(takeoverClaim)),
			"taken over before the frozen install's claim expired")
		GinkgoWriter.Printf("taken over by %s %s after the freeze\n", ptr.Deref(lease.Spec.HolderIdentity, ""), time.Since(frozenAt).Round(time.Millisecond))

		// The frozen manager wakes up while the session still runs in the other install.
		cont()

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Owner).To(HavePrefix(other.ns+"/"), "finished by the install that took it over")
		evs := completeJournal(ctx, other.plugin, final, "--nats-url", url)
		expectStepsOnce(ctx, evs, ns, final.Status.PodName, claimSteps)
	}, SpecTimeout(8*time.Minute))
})

// managerPIDs returns the host processes of the manager installed in release namespace ns (its
// command line carries --install-id=<ns>/...). The local cluster runs containers on this host.
func managerPIDs(ns string) []int {
	GinkgoHelper()
	want := []byte("--install-id=" + ns + "/")
	var pids []int
	for _, pid := range hostPIDs() {
		cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && bytes.Contains(cmd, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostPIDs lists the processes of this host.
func hostPIDs() []int {
	GinkgoHelper()
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// freeze stops the processes pids with SIGSTOP and returns what resumes them (once; at the
// latest when the spec ends, so no frozen process is left behind).
func freeze(pids []int) func() {
	GinkgoHelper()
	signalAll(pids, syscall.SIGSTOP)
	cont := sync.OnceFunc(func() { signalAll(pids, syscall.SIGCONT) })
	DeferCleanup(cont)
	return cont
}

// signalAll sends sig to every process of pids.
func signalAll(pids []int, sig syscall.Signal) {
	GinkgoHelper()
	for _, pid := range pids {
		Expect(syscall.Kill(pid, sig)).To(Succeed(), "signal %v to %d", sig, pid)
	}
}
