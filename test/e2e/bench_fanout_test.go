//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// fanOutWave is the most children the fan-out benchmark's parent has alive at once:
// spec.subagents.maxChildren's maximum in the CRD (256, which is also MaxListedChildren).
// A wider fan-out spawns a wave, waits for all of it, then spawns the next.
const fanOutWave = agentsv1.MaxListedChildren

// fanOutShared is the file the parent writes before spawning and every child reads back:
// identical tool calls are one YAML anchor and many aliases in the script, so that a
// 1 000-child script fits in one ConfigMap.
const fanOutShared = "fan-out-input.txt"

// benchFanOuts are the widths of the fan-out benchmark: BENCH_FANOUT, a comma-separated list
// such as 100,1000 (default 100). Each width is its own spec.
func benchFanOuts() ([]int, error) {
	v := os.Getenv("BENCH_FANOUT")
	if strings.TrimSpace(v) == "" {
		return []int{100}, nil
	}
	var widths []int
	for _, field := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("BENCH_FANOUT=%q: %q is not a positive number of children", v, field)
		}
		widths = append(widths, n)
	}
	return widths, nil
}

// benchFanOutTimeout is how long the fan-out benchmark waits for a parent of n children.
func benchFanOutTimeout(n int) time.Duration {
	return 10*time.Minute + time.Duration(n)*500*time.Millisecond
}

// runWaveFanOut runs a scripted parent in ns that writes fanOutShared, then spawns n children
// in waves of at most fanOutWave, each child making calls tool calls in the shared workspace
// (child i writes out/child-<i>.txt, then reads fanOutShared back), and waits for each,
// checking its answer. It asserts that everything succeeded and every child's file is there,
// and returns the parent, its children, the wall time from creation to a final phase and the
// API server's request counters before and after.
func runWaveFanOut(ctx context.Context, ns string, n, calls int, timeout time.Duration) fanOutRun {
	GinkgoHelper()
	const parent = "fanout"
	script := fanOutWaveScript(parent, n, calls)
	GinkgoWriter.Printf("fan-out script of %d children: %d bytes\n", n, len(script))
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: parent + "-script"},
		Data:       map[string]string{"script.yaml": script},
	}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: parent},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: fmt.Sprintf("Split the work among %d subagents and collect their results.", n),
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm.Name, Key: "script.yaml"}},
			Limits:    agentsv1.Limits{MaxTurns: int32(3*n + 5), Deadline: &metav1.Duration{Duration: timeout}},
			Subagents: agentsv1.SubagentsSpec{MaxChildren: ptr.To(int32(min(n, fanOutWave)))},
		},
	}
	// Delete every session while the operator still runs: their finalizers would
	// otherwise keep the namespace Terminating once the operator is uninstalled.
	DeferCleanup(func(ctx context.Context) {
		Expect(deleteAllSessions(ctx, ns)).To(Succeed())
	}, NodeTimeout(15*time.Minute))

	before, err := apiRequests(ctx)
	Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	Expect(f.Client.Create(ctx, s)).To(Succeed())
	final := waitForOutcome(ctx, s, timeout)
	wall := time.Since(start)
	after, err := apiRequests(ctx)
	Expect(err).NotTo(HaveOccurred())

	Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
	Expect(final.Status.Result).To(Equal(fmt.Sprintf("All %d children finished.", n)),
		"the parent's script checked every child's result as it waited for it")
	// status.children lists at most MaxListedChildren; childrenSummary counts them all.
	Expect(final.Status.Children).To(HaveLen(min(n, agentsv1.MaxListedChildren)))
	for _, c := range final.Status.Children {
		Expect(c.Phase).To(Equal(agentsv1.PhaseSucceeded), "child %s", c.Name)
	}
	Expect(final.Status.ChildrenSummary).NotTo(BeNil(), "status.childrenSummary")
	Expect(final.Status.ChildrenSummary.Total).To(BeNumerically("==", n), "status.childrenSummary.total")
	Expect(final.Status.ChildrenSummary.Phases).To(HaveKeyWithValue(string(agentsv1.PhaseSucceeded), int32(n)),
		"status.childrenSummary.phases")
	children := sharedWorkspaceChildren(ctx, ns, final, n)
	for _, c := range children {
		Expect(c.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "child %s", c.Name)
	}
	expectChildFiles(ctx, ns, final.Status.PodName, n, "child %d")
	return fanOutRun{final: final, children: children, wall: wall, before: before, after: after}
}

// fanOutWaveScript is the parent's script: write fanOutShared, then for each wave of at most
// fanOutWave children spawn them one per turn and wait for each, then count the files. Every
// turn after the first checks the previous call's result (a spawn's agent id, a child's
// answer). Child i writes out/child-<i>.txt, then reads fanOutShared until it made calls tool
// calls; those reads are one YAML anchor and aliases.
func fanOutWaveScript(parent string, n, calls int) string {
	var b strings.Builder
	b.WriteString("turns:\n")
	// expect is what the result of the previous turn's call must contain ("" for none).
	expect := ""
	turn := func(call string, next string) {
		if expect == "" {
			b.WriteString("  - ")
		} else {
			fmt.Fprintf(&b, "  - expect: {lastToolResultContains: %q}\n    ", expect)
		}
		fmt.Fprintf(&b, "toolCalls: [%s]\n", call)
		expect = next
	}
	turn(fmt.Sprintf(`{name: write_file, arguments: {file_path: %s, content: "shared input\n"}}`, fanOutShared), fanOutShared+": wrote")
	for first := 1; first <= n; first += fanOutWave {
		last := min(first+fanOutWave-1, n)
		for i := first; i <= last; i++ {
			// The closing quote of the agent_id: fanout-sub-1 is not fanout-sub-10.
			turn(fmt.Sprintf(`{name: spawn_agent, arguments: {task: "fan-out task %d: write out/child-%d.txt"}}`, i, i),
				fmt.Sprintf("%s-sub-%d\"", parent, i))
		}
		for i := first; i <= last; i++ {
			turn(fmt.Sprintf("{name: wait, arguments: {agent_id: %s-sub-%d}}", parent, i), fmt.Sprintf("wrote out/child-%d.txt", i))
		}
	}
	turn(`{name: shell, arguments: {command: "ls out | wc -l"}}`, strconv.Itoa(n))
	fmt.Fprintf(&b, "  - expect: {lastToolResultContains: %q}\n    text: \"All %d children finished.\"\nagents:\n", expect, n)
	anchored := false
	for i := 1; i <= n; i++ {
		// The colon ends the number: "fan-out task 1:" does not match task 10 or 100.
		fmt.Fprintf(&b, "  - match: \"fan-out task %d:\"\n    turns:\n", i)
		fmt.Fprintf(&b, "      - toolCalls: [{name: write_file, arguments: {file_path: out/child-%[1]d.txt, content: \"child %[1]d\\n\"}}]\n", i)
		for range calls - 1 {
			if !anchored {
				fmt.Fprintf(&b, "      - &read {toolCalls: [{name: read_file, arguments: {file_path: %s}}]}\n", fanOutShared)
				anchored = true
				continue
			}
			b.WriteString("      - *read\n")
		}
		fmt.Fprintf(&b, "      - text: \"wrote out/child-%d.txt\"\n", i)
	}
	return b.String()
}

// isWrite reports whether an apiserver_request_total verb changes an object.
func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		return true
	}
	return false
}

// writes sums the write requests on resource ("agentsessions", "agentsessions/status";
// "" for every resource).
func (c requestCounts) writes(resource string) float64 {
	total := 0.0
	for k, v := range c {
		res, verb, _ := strings.Cut(k, " ")
		if isWrite(verb) && (resource == "" || res == resource) {
			total += v
		}
	}
	return total
}

// topWrites formats the largest write counts by "resource verb", largest first, at most
// limit of them.
func (c requestCounts) topWrites(limit int) string {
	type count struct {
		key string
		n   float64
	}
	var all []count
	for k, v := range c {
		if _, verb, _ := strings.Cut(k, " "); isWrite(verb) {
			all = append(all, count{k, v})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].key < all[j].key
	})
	parts := make([]string, 0, limit)
	for _, c := range all[:min(limit, len(all))] {
		parts = append(parts, fmt.Sprintf("%s=%.0f", c.key, c.n))
	}
	return strings.Join(parts, ", ")
}
