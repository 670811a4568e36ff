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
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
)

// replicasRelease is the release of the replicas spec: three manager replicas sharding the
// sessions (issue 21) over one external NATS.
const replicasRelease = "ao-replicas"

// Issue 21: every replica drives a share of the sessions. One replica frozen with SIGSTOP (hung
// or partitioned) loses its membership and its claims; the others take its running sessions
// over and resume them from the journal; when it wakes up it runs nothing more for them.
var _ = Describe("three manager replicas", Ordered, ContinueOnFailure, Label("replicas", "chaos"), func() {
	op := withExternalNATS(replicasRelease, "ao-replicas-nats", startNATS,
		"replicaCount=3", "sessionClaimDuration="+takeoverClaim.String(),
		"extraArgs={--replica-lease-duration="+takeoverClaim.String()+"}")

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
		var lost []*agentsv1.AgentSession
		for _, s := range byPod[victim] {
			if s.Status.Phase.IsFinal() {
				continue
			}
			lease := &coordinationv1.Lease{}
			key := client.ObjectKey{Namespace: ns, Name: claim.Name(s.UID)}
			var tookOver bool
			Eventually(func(g Gomega, ctx context.Context) {
				g.Expect(f.Client.Get(ctx, key, lease)).To(Succeed())
				holder := ptr.Deref(lease.Spec.HolderIdentity, "")
				g.Expect(holder).NotTo(HaveSuffix("/"+victim), "%s still claimed by the frozen replica", s.Name)
				if tookOver = holder != ""; tookOver {
					return
				}
				// Released: finished by the replica that took it over while the loop
				// waited for the sessions before it (a release keeps the acquire
				// time), or by the victim just before the freeze.
				cur := &agentsv1.AgentSession{}
				g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), cur)).To(Succeed())
				g.Expect(cur.Status.Phase.IsFinal()).To(BeTrue(), "%s released but not finished", s.Name)
				tookOver = lease.Spec.AcquireTime != nil && lease.Spec.AcquireTime.After(frozenAt)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
			if tookOver {
				takeovers = append(takeovers, lease.Spec.AcquireTime.Sub(frozenAt))
				lost = append(lost, s)
			}
		}
		Expect(lost).NotTo(BeEmpty(), "no session of the frozen replica was taken over")
		slices.Sort(takeovers)
		if len(takeovers) > 0 {
			GinkgoWriter.Printf("takeover after the freeze: p50 %s, max %s (%d sessions)\n",
				takeovers[len(takeovers)/2].Round(time.Millisecond), takeovers[len(takeovers)-1].Round(time.Millisecond), len(takeovers))
		}
		// The frozen replica wakes up while they run elsewhere.
		cont()
		wokeAt := time.Now()

		for _, s := range all {
			final := waitForOutcome(ctx, s, 4*time.Minute)
			Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "%s: status.error=%q", s.Name, final.Status.Error)
			evs := completeJournal(ctx, op.plugin, final, "--nats-url", op.url)
			expectStepsOnce(ctx, evs, ns, final.Status.PodName, steps)
		}

		// It found out it was fenced and said so, for each session it lost: its claim taken,
		// its journal fenced or the workspace refusing it, whichever it met first.
		Eventually(func(g Gomega, ctx context.Context) {
			logs, err := f.Clientset.CoreV1().Pods(op.ns).GetLogs(victim, &corev1.PodLogOptions{Container: "manager",
				SinceTime: &metav1.Time{Time: wokeAt.Add(-time.Second)}}).DoRaw(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			for _, s := range lost {
				g.Expect(fencedLine(string(logs), ns+"/"+s.Name)).NotTo(BeEmpty(), "%s logs that it lost %s", victim, s.Name)
			}
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(12*time.Minute))

	It("runs 150 sessions of 10 tool calls with a replica SIGKILLed mid-run: all Succeeded, every call run once, gap-free journals", func(ctx SpecContext) {
		run := startReplicaRun(ctx, "ao-replicas-kill", replicaSessions(), 10, 1)
		// Mid-run: a third of the sessions are driven.
		run.waitDriven(ctx, len(run.sessions)/3)
		victim, takeovers := run.killBusiest(ctx)
		GinkgoWriter.Printf("SIGKILLed replica %s: takeover of its %d running sessions %s\n", victim, len(takeovers), quantiles(takeovers))
		run.expectSucceededOnce(ctx, op.plugin, op.url)
		GinkgoWriter.Printf("%d sessions in %s; finished per replica: %v\n", len(run.sessions), run.elapsed.Round(time.Second), run.finishedBy())
	}, SpecTimeout(25*time.Minute))
})

// fencedLine returns the line of a manager's logs where it stopped driving session (ns/name)
// because another driver took it over, or "".
func fencedLine(logs, session string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, session) && (strings.Contains(line, "Lost the session's claim") ||
			strings.Contains(line, "Fenced:") || strings.Contains(line, "Superseded:")) {
			return line
		}
	}
	return ""
}

// replicaSessions is how many sessions the SIGKILL spec runs (REPLICA_SESSIONS overrides 150).
func replicaSessions() int {
	if n, err := strconv.Atoi(os.Getenv("REPLICA_SESSIONS")); err == nil && n > 0 {
		return n
	}
	return 150
}

// replicaRun is a batch of stepsScript sessions, all created at once, run by an install's
// replicas.
type replicaRun struct {
	ns       string
	steps    int
	created  time.Time
	sessions []*agentsv1.AgentSession
	// After expectSucceededOnce: the final sessions and the time from the first creation to
	// the last completion.
	finals  []*agentsv1.AgentSession
	elapsed time.Duration
}

// startReplicaRun creates n sessions of steps shell calls (each sleeping sleep seconds) in a
// new namespace, sharing one script, and deletes them all at cleanup.
func startReplicaRun(ctx context.Context, prefix string, n, steps, sleep int) *replicaRun {
	GinkgoHelper()
	r := &replicaRun{ns: f.SpecNamespace(ctx, prefix), steps: steps}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "steps"},
		Data: map[string]string{"script.yaml": stepsScript(steps, sleep)}}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(deleteAllSessions(ctx, r.ns)).To(Succeed())
	}, NodeTimeout(9*time.Minute))
	r.created = time.Now()
	for i := range n {
		s := loadSession(r.ns, fmt.Sprintf("s%03d", i), cm.Name)
		s.Spec.Prompt = "Run the steps."
		s.Spec.Limits.MaxTurns = int32(2 * steps)
		Expect(f.Client.Create(ctx, s)).To(Succeed())
		r.sessions = append(r.sessions, s)
	}
	return r
}

// waitDriven waits until at least n sessions have made a tool call.
func (r *replicaRun) waitDriven(ctx context.Context, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega, ctx context.Context) int {
		var l agentsv1.AgentSessionList
		g.Expect(f.Client.List(ctx, &l, client.InNamespace(r.ns))).To(Succeed())
		driven := 0
		for _, s := range l.Items {
			if s.Status.ToolCalls > 0 {
				driven++
			}
		}
		return driven
	}).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(time.Second).Should(BeNumerically(">=", n))
}

// killBusiest SIGKILLs the manager of the replica that holds the most claims of unfinished
// sessions of the run, and returns its pod and, for each of those sessions, the time from the
// kill until a live process acquired its claim (the replica's restarted container or another
// replica; takeover ends with that acquisition, the resume from the journal follows).
func (r *replicaRun) killBusiest(ctx context.Context) (string, []time.Duration) {
	GinkgoHelper()
	var l agentsv1.AgentSessionList
	Expect(f.Client.List(ctx, &l, client.InNamespace(r.ns))).To(Succeed())
	running := map[string]client.ObjectKey{} // claim name -> session
	for _, s := range l.Items {
		if !s.Status.Phase.IsFinal() {
			running[claim.Name(s.UID)] = client.ObjectKeyFromObject(&s)
		}
	}
	var leases coordinationv1.LeaseList
	Expect(f.Client.List(ctx, &leases, client.InNamespace(r.ns), client.HasLabels{claim.LabelClaim})).To(Succeed())
	held := map[string][]string{}
	for _, lease := range leases.Items {
		if _, ok := running[lease.Name]; ok && ptr.Deref(lease.Spec.HolderIdentity, "") != "" {
			h := ptr.Deref(lease.Spec.HolderIdentity, "")
			pod := claim.ParseHolder(h).Pod
			held[pod] = append(held[pod], lease.Name)
		}
	}
	var victim string
	for pod, names := range held {
		if len(names) > len(held[victim]) {
			victim = pod
		}
	}
	Expect(victim).NotTo(BeEmpty(), "a replica holds claims of running sessions")
	pids := podPIDs(victim)
	Expect(pids).NotTo(BeEmpty(), "the manager process of %s", victim)
	signalAll(pids, syscall.SIGKILL)
	killedAt := time.Now()
	GinkgoWriter.Printf("SIGKILLed replica %s (pids %v) holding %d of %d running sessions' claims\n",
		victim, pids, len(held[victim]), len(running))
	var takeovers []time.Duration
	finishing := 0
	for _, name := range held[victim] {
		lease := &coordinationv1.Lease{}
		var final bool
		Eventually(func(g Gomega, ctx context.Context) {
			// A session whose loop had ended (its claim kept until its final status was written)
			// is finished by whoever reconciles it next, without a new claim: no takeover.
			s := &agentsv1.AgentSession{}
			g.Expect(f.Client.Get(ctx, running[name], s)).To(Succeed())
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, lease)).To(Succeed())
			if final = s.Status.Phase.IsFinal() && (lease.Spec.AcquireTime == nil || !lease.Spec.AcquireTime.After(killedAt)); final {
				return
			}
			g.Expect(lease.Spec.AcquireTime).NotTo(BeNil())
			g.Expect(lease.Spec.AcquireTime.Time).To(BeTemporally(">", killedAt), "claim %s acquired again", name)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		if final {
			finishing++
			continue
		}
		takeovers = append(takeovers, lease.Spec.AcquireTime.Sub(killedAt))
	}
	if finishing > 0 {
		GinkgoWriter.Printf("%d of its sessions had ended their loop and were finished without a new claim\n", finishing)
	}
	slices.Sort(takeovers)
	return victim, takeovers
}

// expectSucceededOnce waits until every session of the run Succeeded, and checks each one's
// journal (gap-free, every event once, ending with the session's end) and that every step ran
// exactly once in its workspace (counted there, by the command itself).
func (r *replicaRun) expectSucceededOnce(ctx context.Context, plugin, natsURL string) {
	GinkgoHelper()
	var last time.Time
	for _, s := range r.sessions {
		final := waitForOutcome(ctx, s, 10*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "%s: status.error=%q", s.Name, final.Status.Error)
		if t := final.Status.CompletionTime; t != nil && t.After(last) {
			last = t.Time
		}
		r.finals = append(r.finals, final)
	}
	r.elapsed = last.Sub(r.created)
	for _, final := range r.finals {
		evs := completeJournal(ctx, plugin, final, "--nats-url", natsURL)
		expectStepsOnce(ctx, evs, r.ns, final.Status.PodName, r.steps)
	}
}

// finishedBy counts the run's sessions by the replica that drove them to the end.
func (r *replicaRun) finishedBy() map[string]int {
	by := map[string]int{}
	for _, s := range r.finals {
		by[s.Status.Owner[strings.LastIndex(s.Status.Owner, "/")+1:]]++
	}
	return by
}

// quantiles formats p50, p99 and the maximum of sorted durations.
func quantiles(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "(none)"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d)", percentile(sorted, 50).Round(time.Millisecond),
		percentile(sorted, 99).Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), len(sorted))
}

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
