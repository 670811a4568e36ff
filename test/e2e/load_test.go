//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// loadScript makes two tool calls in the session's own workspace pod, and its last turn checks
// that the command saw the file the first call wrote.
const loadScript = `turns:
  - toolCalls:
      - name: write_file
        arguments: {file_path: load.txt, content: "written under load\n"}
  - toolCalls:
      - name: shell
        arguments: {command: "cat load.txt"}
  - expect: {lastToolResultContains: "written under load"}
    text: "Done under load."
`

// loadResult is the final answer of loadScript.
const loadResult = "Done under load."

// loadSessions is how many sessions the load spec runs at once (LOAD_SESSIONS overrides it).
func loadSessions() int {
	if n, err := strconv.Atoi(os.Getenv("LOAD_SESSIONS")); err == nil && n > 0 {
		return n
	}
	return 200
}

// The manager's controller, as named in its metrics.
const loadController = "agentsession"

// Timing and memory are reported (and appended to BENCH_OUT), not asserted, except for loose
// sanity bounds: the spec fails when a session does not succeed, the manager restarts, or a
// reconcile takes seconds. At 200 sessions it takes about two minutes on the 2-core development
// machine, so `make test` runs it; the cluster needs room for 202 more pods (hack/cluster.sh
// sets the kubelet's maxPods to 250).
var _ = Describe("load: many concurrent scripted sessions", Ordered, Label("load"), func() {
	const release = "ao-load"
	var operatorNS string

	BeforeAll(func(ctx SpecContext) {
		operatorNS = installOperator(ctx, release, "ao-load-op")
	}, NodeTimeout(6*time.Minute))

	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() && operatorNS != "" {
			f.DumpNamespace(ctx, operatorNS, GinkgoWriter)
		}
	})

	It("runs LOAD_SESSIONS (default 200) top-level scripted sessions at once to Succeeded, and the manager stays responsive", func(ctx SpecContext) {
		n := loadSessions()
		room, err := podRoom(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(room).To(BeNumerically(">=", n+2),
			"the cluster has room for %d more pods and the spec needs %d (%d sessions and 2 probes, one pod each): "+
				"raise the kubelet's maxPods or lower LOAD_SESSIONS", room, n+2, n)
		ns := f.SpecNamespace(ctx, "ao-load")
		// Delete every session while the operator still runs: their finalizers would otherwise
		// keep the namespace Terminating once the operator is uninstalled.
		DeferCleanup(func(ctx context.Context) {
			Expect(deleteAllSessions(ctx, ns)).To(Succeed())
		}, NodeTimeout(10*time.Minute))

		pods, err := managerPods(ctx, operatorNS, release)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1))
		manager := pods[0]
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "load-script"},
			Data:       map[string]string{"script.yaml": loadScript},
		}
		Expect(f.Client.Create(ctx, cm)).To(Succeed())

		// The responsiveness probe, first on an idle manager.
		idle := probeSession(ctx, loadSession(ns, "probe-idle", cm.Name))
		Expect(idle.err).NotTo(HaveOccurred())

		before, err := scrapeManager(ctx, operatorNS, manager.Name)
		Expect(err).NotTo(HaveOccurred())
		requestsBefore, err := apiRequests(ctx)
		Expect(err).NotTo(HaveOccurred())

		// Sample the manager's RSS and work queue depth while the load runs.
		sampling, stopSampling := context.WithCancel(ctx)
		peaks := make(chan managerPeaks, 1)
		go func() {
			defer GinkgoRecover()
			peaks <- sampleManager(sampling, operatorNS, manager.Name, time.Second)
		}()
		DeferCleanup(stopSampling) // if the spec fails before the sampling is stopped

		// Create the n sessions at once (16 at a time, as many clients would), then the probe.
		names := make([]string, n)
		created := make([]time.Time, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		next := make(chan int)
		for range 16 {
			wg.Go(func() {
				for i := range next {
					names[i] = fmt.Sprintf("load-%03d", i)
					created[i] = time.Now()
					errs[i] = f.Client.Create(ctx, loadSession(ns, names[i], cm.Name))
				}
			})
		}
		start := time.Now()
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		allCreated := time.Since(start)
		for i, err := range errs {
			Expect(err).NotTo(HaveOccurred(), "create session %s", names[i])
		}
		probed := make(chan probeResult, 1)
		go func() {
			defer GinkgoRecover()
			probed <- probeSession(ctx, loadSession(ns, "probe-load", cm.Name))
		}()

		// Wait for every session to succeed, noting when each was first seen final.
		index := make(map[string]int, n)
		for i, name := range names {
			index[name] = i
		}
		done := make([]time.Duration, n)
		finished := 0
		timeout := 5*time.Minute + time.Duration(n)*3*time.Second
		Eventually(func(g Gomega, ctx context.Context) {
			var list agentsv1.AgentSessionList
			g.Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			now := time.Now()
			for _, s := range list.Items {
				i, ok := index[s.Name]
				if !ok || done[i] != 0 || !s.Status.Phase.IsFinal() {
					continue
				}
				if s.Status.Phase != agentsv1.PhaseSucceeded {
					StopTrying(fmt.Sprintf("session %s ended %s: %s", s.Name, s.Status.Phase, s.Status.Error)).Now()
				}
				done[i] = now.Sub(created[i])
				finished++
			}
			g.Expect(finished).To(Equal(n), "sessions Succeeded")
		}).WithContext(ctx).WithTimeout(timeout).WithPolling(250 * time.Millisecond).Should(Succeed())
		wall := time.Since(start)
		underLoad := <-probed
		Expect(underLoad.err).NotTo(HaveOccurred())
		stopSampling()
		peak := <-peaks
		after, err := scrapeManager(ctx, operatorNS, manager.Name)
		Expect(err).NotTo(HaveOccurred())
		requestsAfter, err := apiRequests(ctx)
		Expect(err).NotTo(HaveOccurred())

		// Every session ran its script to the end in its own pod.
		var list agentsv1.AgentSessionList
		Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		podOwners := map[string]string{}
		for _, s := range list.Items {
			if _, ok := index[s.Name]; !ok {
				continue
			}
			Expect(s.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "session %s", s.Name)
			Expect(s.Status.Result).To(Equal(loadResult), "session %s ran its script to the end", s.Name)
			Expect(s.Status.ToolCalls).To(BeNumerically("==", 2), "session %s tool calls", s.Name)
			Expect(s.Status.PodName).NotTo(BeEmpty(), "session %s pod", s.Name)
			Expect(podOwners).NotTo(HaveKey(s.Status.PodName), "session %s has its own pod", s.Name)
			podOwners[s.Status.PodName] = s.Name
		}
		Expect(podOwners).To(HaveLen(n))

		// The manager never restarted.
		pods, err = managerPods(ctx, operatorNS, release)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1))
		Expect(pods[0].UID).To(Equal(manager.UID), "the manager pod was not replaced")
		for _, c := range pods[0].Status.ContainerStatuses {
			Expect(c.RestartCount).To(BeZero(), "container %s of the manager restarted", c.Name)
		}

		reconcile := after.histogram("controller_runtime_reconcile_time_seconds", "controller", loadController).
			sub(before.histogram("controller_runtime_reconcile_time_seconds", "controller", loadController))
		queued := after.histogram("workqueue_queue_duration_seconds", "name", loadController).
			sub(before.histogram("workqueue_queue_duration_seconds", "name", loadController))
		reconciles := after.sum("controller_runtime_reconcile_total", "controller", loadController) -
			before.sum("controller_runtime_reconcile_total", "controller", loadController)
		reconcileErrors := after.sum("controller_runtime_reconcile_errors_total", "controller", loadController) -
			before.sum("controller_runtime_reconcile_errors_total", "controller", loadController)
		cpu := after.sum("process_cpu_seconds_total") - before.sum("process_cpu_seconds_total")

		slices.Sort(done)
		what := fmt.Sprintf("load: %d sessions x 2 tool calls", n)
		rows := [][3]string{ // what, result, target
			{"creates (16 clients)", allCreated.Round(10 * time.Millisecond).String(), ""},
			{"wall time, first create -> all Succeeded", wall.Round(10 * time.Millisecond).String(), "no worse than previous (issue 24)"},
			{"create -> Succeeded per session", fmt.Sprintf("first %s, median %s, p99 %s, last %s (polled every 250 ms)",
				done[0].Round(10*time.Millisecond), median(done), percentile(done, 99).Round(10*time.Millisecond), done[n-1].Round(10*time.Millisecond)), ""},
			{"probe session create -> status.phase set, idle", idle.phaseSet.Round(time.Millisecond).String(), ""},
			{"probe session create -> status.phase set, right behind the burst (first status)",
				underLoad.phaseSet.Round(time.Millisecond).String(), "< 2 s (issue 24)"},
			{"probe session create -> Succeeded, idle / under load",
				fmt.Sprintf("%s / %s", idle.succeeded.Round(10*time.Millisecond), underLoad.succeeded.Round(10*time.Millisecond)), ""},
			{"manager reconciles (errors)", fmt.Sprintf("%.0f (%.0f)", reconciles, reconcileErrors), ""},
			{"manager reconcile time", reconcile.String(), ""},
			{"manager work queue wait", queued.String(), ""},
			{"manager peak work queue depth (sampled every 1 s)", fmt.Sprintf("%.0f", peak.depth), ""},
			{"manager peak RSS (sampled every 1 s)", fmt.Sprintf("%.0f MiB", peak.rss/(1<<20)), ""},
			{"manager CPU", fmt.Sprintf("%.1f s", cpu), ""},
			{"API server requests (whole cluster)", fmt.Sprint(requestsAfter.total() - requestsBefore.total()), ""},
			{"of them on agentsessions", requestsAfter.sub(requestsBefore).agentSessions(), ""},
			{"agent_operator_* metric series, after 1 session / after all", fmt.Sprintf("%d / %d", before.series("agent_operator_"), after.series("agent_operator_")), ""},
		}
		var table strings.Builder
		tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
			benchRow(what+", "+r[0], r[1], r[2])
		}
		Expect(tw.Flush()).To(Succeed())
		GinkgoWriter.Printf("\n%s (manager pod %s, no restarts)\n%s\n", what, manager.Name, table.String())

		// Latencies are reported above, never asserted (they depend on the machine's load);
		// responsiveness is asserted by the probe session above reaching Succeeded under load.
		Expect(reconcile.count).To(BeNumerically(">=", n), "every session was reconciled")
		// Metric labels are bounded: n sessions in one namespace add no series per session
		// (only label values first seen under load, such as a phase or a histogram's tool).
		Expect(after.series("agent_operator_")).To(BeNumerically("<=", before.series("agent_operator_")+100),
			"the operator's metric series grow with the number of sessions")

		start = time.Now()
		Expect(deleteAllSessions(ctx, ns)).To(Succeed())
		benchRow(what+", delete all -> all gone (finalizers)", time.Since(start).Round(10*time.Millisecond).String(), "")
	}, SpecTimeout(40*time.Minute))
})

// podRoom is how many more pods the cluster's Ready, schedulable nodes admit (their
// allocatable pods less the pods not yet terminated).
func podRoom(ctx context.Context) (int, error) {
	nodes, err := f.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	room := 0
	for _, node := range nodes.Items {
		ready := slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		})
		if !ready || node.Spec.Unschedulable {
			continue
		}
		room += int(node.Status.Allocatable.Pods().Value())
		pods, err := f.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
		if err != nil {
			return 0, fmt.Errorf("list pods of node %s: %w", node.Name, err)
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				room--
			}
		}
	}
	return room, nil
}

// loadSession is a session replaying loadScript from the ConfigMap cm. Its workspace pod
// requests little, so that hundreds fit on a small node; the init container's requests
// follow the workspace container's.
func loadSession(ns, name, cm string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Write load.txt, then print it.",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm, Key: "script.yaml"}},
			Limits: agentsv1.Limits{MaxTurns: 5, Deadline: &metav1.Duration{Duration: 30 * time.Minute}},
			Workspace: agentsv1.WorkspaceSpec{Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("100Mi")},
			}},
		},
	}
}

// probeResult is how long a session took from its creation to its first status (the
// manager's first reconcile of it) and to Succeeded.
type probeResult struct {
	phaseSet, succeeded time.Duration
	err                 error
}

// probeSession creates s and polls it closely until it succeeds. It returns an error rather
// than failing, so that it can run beside the spec.
func probeSession(ctx context.Context, s *agentsv1.AgentSession) probeResult {
	var r probeResult
	start := time.Now()
	if r.err = f.Client.Create(ctx, s); r.err != nil {
		return r
	}
	got := &agentsv1.AgentSession{}
	r.err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.Client.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			return false, err
		}
		if r.phaseSet == 0 && got.Status.Phase != "" {
			r.phaseSet = time.Since(start)
		}
		switch {
		case got.Status.Phase == agentsv1.PhaseSucceeded:
			r.succeeded = time.Since(start)
			return true, nil
		case got.Status.Phase.IsFinal():
			return false, fmt.Errorf("probe session %s ended %s: %s", s.Name, got.Status.Phase, got.Status.Error)
		}
		return false, nil
	})
	if r.err != nil {
		r.err = fmt.Errorf("probe session %s: %w", s.Name, r.err)
	}
	return r
}

// managerPeaks are the largest values sampleManager saw.
type managerPeaks struct {
	rss, depth float64
}

// sampleManager scrapes the manager's metrics every interval until ctx ends and returns the
// peak RSS and the peak depth of the controller's work queue. Failed scrapes are skipped.
func sampleManager(ctx context.Context, ns, pod string, interval time.Duration) managerPeaks {
	var p managerPeaks
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if m, err := scrapeManager(ctx, ns, pod); err == nil {
			p.rss = max(p.rss, m.sum("process_resident_memory_bytes"))
			p.depth = max(p.depth, m.sum("workqueue_depth", "name", loadController))
		}
		select {
		case <-ctx.Done():
			return p
		case <-tick.C:
		}
	}
}

// metricSample is one sample of the Prometheus text format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// managerMetrics are the samples of one scrape of the manager.
type managerMetrics []metricSample

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)

// scrapeManager reads the manager pod's metrics endpoint (port 8080, plain HTTP, the chart's
// default) through the API server's pod proxy.
func scrapeManager(ctx context.Context, ns, pod string) (managerMetrics, error) {
	raw, err := f.Clientset.CoreV1().Pods(ns).ProxyGet("http", pod, "8080", "metrics", nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read manager metrics: %w", err)
	}
	var m managerMetrics
	for _, line := range strings.Split(string(raw), "\n") {
		match := sampleLine.FindStringSubmatch(line)
		if match == nil {
			continue // a comment or a blank line
		}
		v, err := strconv.ParseFloat(match[3], 64)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		s := metricSample{name: match[1], labels: map[string]string{}, value: v}
		for _, l := range metricLabel.FindAllStringSubmatch(match[2], -1) {
			s.labels[l[1]] = l[2]
		}
		m = append(m, s)
	}
	return m, nil
}

// series counts the samples whose name starts with prefix (each is one series).
func (m managerMetrics) series(prefix string) int {
	n := 0
	for _, s := range m {
		if strings.HasPrefix(s.name, prefix) {
			n++
		}
	}
	return n
}

// sum adds up the samples named name whose labels include the label/value pairs of match.
func (m managerMetrics) sum(name string, match ...string) float64 {
	total := 0.0
	for _, s := range m {
		if s.name == name && s.matches(match) {
			total += s.value
		}
	}
	return total
}

func (s metricSample) matches(pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if s.labels[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}

// histogram collects the histogram name (its _bucket, _sum and _count samples) restricted to
// the samples whose labels include the pairs of match.
func (m managerMetrics) histogram(name string, match ...string) histogram {
	h := histogram{buckets: map[float64]float64{}}
	for _, s := range m {
		if !s.matches(match) {
			continue
		}
		switch s.name {
		case name + "_bucket":
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err == nil {
				h.buckets[le] += s.value
			}
		case name + "_sum":
			h.total += s.value
		case name + "_count":
			h.count += s.value
		}
	}
	return h
}

// histogram is a cumulative Prometheus histogram: buckets maps an upper bound (le) to the
// number of observations at or below it.
type histogram struct {
	buckets      map[float64]float64
	total, count float64
}

// sub returns h minus an earlier scrape of the same histogram.
func (h histogram) sub(before histogram) histogram {
	d := histogram{buckets: map[float64]float64{}, total: h.total - before.total, count: h.count - before.count}
	for le, v := range h.buckets {
		d.buckets[le] = v - before.buckets[le]
	}
	return d
}

// quantile returns the upper bound of the bucket holding the q-quantile (0 < q <= 1): the
// quantile is at most that. It is +Inf when the quantile is beyond the largest finite bucket
// and 0 when there are no observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(h.buckets))
	for le := range h.buckets {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	for _, le := range bounds {
		if h.buckets[le] >= q*h.count {
			return le
		}
	}
	return math.Inf(1)
}

func (h histogram) String() string {
	if h.count == 0 {
		return "no observations"
	}
	seconds := func(v float64) string {
		if math.IsInf(v, 1) {
			return "+Inf"
		}
		return time.Duration(v * float64(time.Second)).String()
	}
	return fmt.Sprintf("mean %s, p50 <= %s, p99 <= %s, max <= %s (%.0f observations; bounds are bucket edges)",
		time.Duration(h.total/h.count*float64(time.Second)).Round(time.Microsecond),
		seconds(h.quantile(0.5)), seconds(h.quantile(0.99)), seconds(h.quantile(1)), h.count)
}
