//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/controllers/agentsession"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// firstToolScript's first tool call records, in the pod, the wall-clock time at which the
// session's first tool ran (nanoseconds since the epoch; the node's clock is the suite's
// clock, the cluster being local).
const firstToolScript = `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "date +%s%N > /workspace/.first-tool"}
  - text: "Started."
`

// benchStarts is how many sessions each start mode measures (BENCH_STARTS overrides it).
func benchStarts() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_STARTS")); err == nil && n > 0 {
		return n
	}
	return 5
}

// Timing is reported, never asserted: these specs fail only when a session does.
var _ = Describe("session start, cold and from the warm pool", Ordered, Label("bench"), func() {
	const release = "ao-bench"
	var warmNS, coldNS, operatorNS, plugin string

	BeforeAll(func(ctx SpecContext) {
		var err error
		ns, err := f.CreateNamespace(ctx, "ao-bench-warm")
		Expect(err).NotTo(HaveOccurred())
		warmNS = ns.Name
		DeferCleanup(func(ctx context.Context) { Expect(f.DeleteNamespace(ctx, warmNS)).To(Succeed()) })
		ns, err = f.CreateNamespace(ctx, "ao-bench-cold")
		Expect(err).NotTo(HaveOccurred())
		coldNS = ns.Name
		DeferCleanup(func(ctx context.Context) { Expect(f.DeleteNamespace(ctx, coldNS)).To(Succeed()) })
		// The operator goes away first (cleanups run last-in first-out) only after the
		// sessions' own cleanups ran; the pool's pods go with the warm namespace.
		operatorNS = installOperator(ctx, release, "ao-bench-op",
			"workspace.warmPools[0].namespace="+warmNS, "workspace.warmPools[0].size=2")
		plugin, err = framework.BuildPlugin(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(6*time.Minute))

	// startLatency creates a session replaying firstToolScript in ns and returns the time from
	// its creation (the script's ConfigMap exists already, as a real model's Secret would) to
	// its first tool run, the pod it ran in and when it was created.
	startLatency := func(ctx context.Context, ns, name string) (time.Duration, string, time.Time) {
		GinkgoHelper()
		cm := createScript(ctx, ns, name, firstToolScript)
		start := time.Now()
		s := scriptedSessionOf(ctx, ns, name, cm)
		final := waitForFinalPhase(ctx, s)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: final.Status.PodName,
			Command: []string{"cat", "/workspace/.first-tool"}})
		Expect(err).NotTo(HaveOccurred())
		ns64, err := strconv.ParseInt(strings.TrimSpace(res.Stdout), 10, 64)
		Expect(err).NotTo(HaveOccurred(), "first-tool time %q", res.Stdout)
		return time.Unix(0, ns64).Sub(start), final.Status.PodName, start
	}

	// poolReady waits until the warm pool has its two pods Running and Ready.
	poolReady := func(ctx context.Context) {
		GinkgoHelper()
		Eventually(func(g Gomega, ctx context.Context) {
			var pods corev1.PodList
			g.Expect(f.Client.List(ctx, &pods, client.InNamespace(warmNS), client.HasLabels{agentsession.LabelWarmPool})).To(Succeed())
			ready := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
						ready++
					}
				}
			}
			g.Expect(ready).To(Equal(2), "ready warm pods")
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	}

	It("measures kubectl apply to first tool result, cold and warm", func(ctx SpecContext) {
		n := benchStarts()
		pods, err := managerPods(ctx, operatorNS, release)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1))
		manager := pods[0].Name
		var cold, warm []time.Duration
		// The manager's start-stage histogram, summed over the warm starts only: it is scraped
		// right before and after each (the cold starts observe it too).
		stages := map[string]*stageTotal{}
		// When each event of a warm start's journal was stamped, up to its first tool result.
		timeline := journalTimeline{}
		for i := range n {
			d, pod, _ := startLatency(ctx, coldNS, fmt.Sprintf("cold-%d", i))
			Expect(pod).To(HaveSuffix("-ws"), "a cold session gets its own pod")
			cold = append(cold, d)

			poolReady(ctx)
			before, err := scrapeManager(ctx, operatorNS, manager)
			Expect(err).NotTo(HaveOccurred())
			name := fmt.Sprintf("pooled-%d", i)
			d, pod, created := startLatency(ctx, warmNS, name)
			Expect(pod).To(And(HavePrefix("warm-"), Not(Equal(name+"-ws"))), "a session in the pool's namespace claims a warm pod")
			owned := &corev1.Pod{}
			Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: warmNS, Name: pod}, owned)).To(Succeed())
			Expect(metav1.GetControllerOf(owned)).NotTo(BeNil(), "the claimed pod is owned by its session")
			warm = append(warm, d)
			timeline.add(journalOf(ctx, plugin, warmNS, name), created)
			after, err := scrapeManager(ctx, operatorNS, manager)
			Expect(err).NotTo(HaveOccurred())
			for _, stage := range startStages {
				h := after.histogram(startStageMetric, "stage", stage).sub(before.histogram(startStageMetric, "stage", stage))
				if stages[stage] == nil {
					stages[stage] = &stageTotal{}
				}
				stages[stage].seconds += h.total
				stages[stage].count += h.count
			}
		}
		slices.Sort(cold)
		slices.Sort(warm)
		benchRow(fmt.Sprintf("apply -> first tool result, cold pod (median of %d)", n),
			fmt.Sprintf("%s (min %s, max %s)", median(cold), cold[0], cold[len(cold)-1]), "within 2 s of the pod's own start")
		benchRow(fmt.Sprintf("apply -> first tool result, warm pool (median of %d)", n),
			fmt.Sprintf("%s (min %s, max %s)", median(warm), warm[0], warm[len(warm)-1]), "<= 50 ms (issue 24; issue 9: < 1 s)")
		for _, stage := range startStages {
			benchRow("warm start: "+stage, stages[stage].String(), "")
		}
		for _, r := range timeline.rows() {
			benchRow("warm start: journal, create -> "+r[0], r[1], "")
		}
	}, SpecTimeout(15*time.Minute))

	It("counts the API writes of sessions that call a tool every 2 s for a minute", func(ctx SpecContext) {
		poolReady(ctx) // the pool refilled after the warm starts: its pods' writes are done
		writesPerSessionMinute(ctx, f.SpecNamespace(ctx, "ao-bench-writes"))
	}, SpecTimeout(15*time.Minute))

	widths, err := benchFanOuts()
	if err != nil {
		It("fans out children: BENCH_FANOUT is valid", func() { Fail(err.Error()) })
		return
	}
	for _, n := range widths {
		timeout := benchFanOutTimeout(n)
		It(fmt.Sprintf("fans out %d children of 10 tool calls each and measures the manager", n), func(ctx SpecContext) {
			fanOutBench(ctx, operatorNS, release, n, timeout)
		}, SpecTimeout(timeout+15*time.Minute))
	}
})

// startStageMetric is the manager's histogram of the stages of a session's start, by its
// label stage (issue 24's breakdown of a warm start).
const startStageMetric = "agent_operator_session_start_stage_seconds"

// startStages are the values of startStageMetric's stage label, in the order a start runs them
// (runner_to_first_tool spans the others from the runner's start).
var startStages = []string{"runner_claim", "build", "pod_check", "exec_handshake", "spare", "first_tool_call", "runner_to_first_tool"}

// stageTotal sums one stage's observations over several scrapes.
type stageTotal struct {
	seconds, count float64
}

// String is the stage's mean, or n/a when the manager observed none (or has no such metric).
func (t *stageTotal) String() string {
	if t == nil || t.count == 0 {
		return "n/a (no observations of " + startStageMetric + ")"
	}
	return fmt.Sprintf("mean %s (%.0f observations)", time.Duration(t.seconds/t.count*float64(time.Second)).Round(10*time.Microsecond), t.count)
}

// fanOutBench runs the fan-out of n children in a namespace of its own while it samples the
// manager's RSS, and reports its wall time, the manager's CPU and peak RSS, and the API
// requests and writes, in all and per child.
func fanOutBench(ctx context.Context, operatorNS, release string, n int, timeout time.Duration) {
	GinkgoHelper()
	ns := f.SpecNamespace(ctx, "ao-bench-fanout")
	pods, err := managerPods(ctx, operatorNS, release)
	Expect(err).NotTo(HaveOccurred())
	Expect(pods).To(HaveLen(1))
	manager := pods[0].Name
	cpu0, _, err := managerProcess(ctx, operatorNS, manager)
	Expect(err).NotTo(HaveOccurred())

	// Sample the manager's RSS while the fan-out runs (its peak is the largest sample).
	sampling, stop := context.WithCancel(ctx)
	DeferCleanup(stop) // if the run fails before the sampling is stopped
	peak := make(chan float64, 1)
	go func() {
		defer GinkgoRecover()
		var largest float64
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, rss, err := managerProcess(sampling, operatorNS, manager); err == nil && rss > largest {
				largest = rss
			}
			select {
			case <-sampling.Done():
				peak <- largest
				return
			case <-tick.C:
			}
		}
	}()
	run := runWaveFanOut(ctx, ns, n, 10, timeout)
	stop()
	rss := <-peak
	cpu1, _, err := managerProcess(ctx, operatorNS, manager)
	Expect(err).NotTo(HaveOccurred())

	rssTarget := "< 300 MiB" // issue 9, at 100 children
	if n > 100 {
		rssTarget = "< 500 MiB" // issue 24, at 1 000 children
	}
	requests := run.after.sub(run.before)
	perChild := func(v float64) string { return fmt.Sprintf("%.1f", v/float64(n)) }
	what := fmt.Sprintf("fan-out: %d children x 10 tool calls, shared workspace", n)
	if n > fanOutWave {
		what += fmt.Sprintf(" (waves of %d)", fanOutWave)
	}
	benchRow(what+", wall time", run.wall.Round(10*time.Millisecond).String(), "< 60 s")
	benchRow(what+", manager CPU", fmt.Sprintf("%.1f s", cpu1-cpu0), "")
	benchRow(what+", manager peak RSS (sampled every 250 ms)", fmt.Sprintf("%.0f MiB", rss/(1<<20)), rssTarget)
	benchRow(what+", API server requests (whole cluster)", fmt.Sprint(run.after.total()-run.before.total()), "")
	benchRow(what+", of them on agentsessions", requests.agentSessions(), "")
	benchRow(what+", API server requests per child (whole cluster)", perChild(float64(requests.total())), "")
	benchRow(what+", agentsessions writes per child (status included)",
		perChild(requests.writes("agentsessions")+requests.writes("agentsessions/status")), "")
	benchRow(what+", status writes per child (agentsessions/status)", perChild(requests.writes("agentsessions/status")), "")
}

// managerProcess reads process_cpu_seconds_total and process_resident_memory_bytes from the
// manager pod's metrics endpoint (port 8080, the chart's default), through the API server's
// pod proxy.
func managerProcess(ctx context.Context, ns, pod string) (cpu, rss float64, err error) {
	raw, err := f.Clientset.CoreV1().Pods(ns).ProxyGet("http", pod, "8080", "metrics", nil).DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read manager metrics: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			cpu, err = strconv.ParseFloat(value, 64)
		case "process_resident_memory_bytes":
			rss, err = strconv.ParseFloat(value, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("parse %q: %w", line, err)
		}
	}
	return cpu, rss, nil
}

func median(sorted []time.Duration) time.Duration {
	return sorted[len(sorted)/2].Round(time.Millisecond)
}

// journalOf is the journal of session ns/name as `kubectl agent logs --raw` prints it.
func journalOf(ctx context.Context, plugin, ns, name string) []loop.Event {
	GinkgoHelper()
	raw, err := framework.RunPlugin(ctx, plugin, kubeconfig(), "logs", "--raw", "-n", ns, name)
	Expect(err).NotTo(HaveOccurred())
	Expect(raw.ExitCode).To(Equal(0), "kubectl agent logs --raw: %s", raw.Stderr)
	return parseRawEvents(raw.Stdout)
}

// journalTimeline sums, over several sessions, when each of the first events of a session's
// journal was stamped after the session's create, up to its first TOOL_CALL_END: where a
// start's time goes before and inside the runner (the node's clock is the suite's).
type journalTimeline struct {
	order []string // event kinds, "KIND #n" for the n-th of a kind, in journal order
	sum   map[string]time.Duration
	count map[string]int
}

// add adds the offsets of evs from created.
func (t *journalTimeline) add(evs []loop.Event, created time.Time) {
	if t.sum == nil {
		t.sum, t.count = map[string]time.Duration{}, map[string]int{}
	}
	seen := map[loop.EventKind]int{}
	for _, ev := range evs {
		seen[ev.Kind]++
		key := string(ev.Kind)
		if n := seen[ev.Kind]; n > 1 {
			key = fmt.Sprintf("%s #%d", ev.Kind, n)
		}
		if _, ok := t.sum[key]; !ok {
			t.order = append(t.order, key)
		}
		t.sum[key] += ev.Time.Sub(created)
		t.count[key]++
		if ev.Kind == loop.EventToolCallEnd {
			return
		}
	}
}

// rows are the mean offset of each event, in journal order, with how many sessions had it.
func (t *journalTimeline) rows() [][2]string {
	var rows [][2]string
	for _, key := range t.order {
		mean := t.sum[key] / time.Duration(t.count[key])
		rows = append(rows, [2]string{key, fmt.Sprintf("mean %s (%d sessions)", mean.Round(100*time.Microsecond), t.count[key])})
	}
	return rows
}
