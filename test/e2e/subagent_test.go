//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// subagentRelease is the Helm release of the subagent specs; its own name keeps its
// cluster-scoped RBAC apart from the other specs' release.
const subagentRelease = "ao-e2e-subagents"

// fanOut is how many children the fan-out spec spawns.
const fanOut = 20

// These specs install the operator with its Helm chart (in their own release, so they run
// alone with -ginkgo.focus) and drive subagents as child AgentSessions on the real cluster.
var _ = Describe("subagents as child sessions", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		installOperator(ctx, subagentRelease, "ao-operator")
	}, NodeTimeout(5*time.Minute))

	It("fans out 20 children that each write a file in the shared workspace, and the parent reads every result", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-subagents")
		run := runFanOut(ctx, ns, fanOut, 1, 3*time.Minute)
		final, children, wall, before, after := run.final, run.children, run.wall, run.before, run.after
		GinkgoWriter.Printf("fan-out of %d children: wall time %s (parent created to parent Completed)\n", fanOut, wall.Round(time.Millisecond))
		GinkgoWriter.Printf("API requests in that time, whole cluster (kubelet, controllers, this test's polling included): %d\n",
			after.total()-before.total())
		GinkgoWriter.Printf("  of them on agentsessions: %s\n", after.sub(before).agentSessions())

		// The garbage collector deletes the children with their parent (controller
		// ownerReferences with blockOwnerDeletion); their finalizers stop their runners.
		Expect(f.Client.Delete(ctx, final)).To(Succeed())
		for _, c := range children {
			Expect(f.WaitForGone(ctx, &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name}}, 2*time.Minute)).To(Succeed())
		}
	}, SpecTimeout(6*time.Minute))
})

// fanOutRun is what runFanOut observed.
type fanOutRun struct {
	final         *agentsv1.AgentSession
	children      []agentsv1.AgentSession
	wall          time.Duration
	before, after requestCounts
}

// runFanOut runs a scripted parent in ns that spawns n children, each making calls tool
// calls in the shared workspace (child i writes out/child-<i>.txt), waits for each and checks
// its answer. It asserts that everything succeeded and every child's file is there, and
// returns the parent, its children, the wall time from creation to a final phase and the API
// server's request counters before and after.
func runFanOut(ctx context.Context, ns string, n, calls int, timeout time.Duration) fanOutRun {
	GinkgoHelper()
	const parent = "fanout"
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: parent + "-script"},
		Data:       map[string]string{"script.yaml": fanOutScript(parent, n, calls)},
	}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: parent},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: fmt.Sprintf("Split the work among %d subagents and collect their results.", n),
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm.Name, Key: "script.yaml"}},
			Limits:    agentsv1.Limits{MaxTurns: int32(3 * n), Deadline: &metav1.Duration{Duration: 20 * time.Minute}},
			Subagents: agentsv1.SubagentsSpec{MaxChildren: ptr.To(int32(n))},
		},
	}
	// Delete every session while the operator still runs: their finalizers would
	// otherwise keep the namespace Terminating once the operator is uninstalled.
	DeferCleanup(func(ctx context.Context) {
		Expect(deleteAllSessions(ctx, ns)).To(Succeed())
	}, NodeTimeout(10*time.Minute))

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
	Expect(final.Status.Children).To(HaveLen(n))
	for _, c := range final.Status.Children {
		Expect(c.Phase).To(Equal(agentsv1.PhaseSucceeded), "child %s", c.Name)
	}
	children := sharedWorkspaceChildren(ctx, ns, final, n)
	expectChildFiles(ctx, ns, final.Status.PodName, n, "child %02d")
	return fanOutRun{final: final, children: children, wall: wall, before: before, after: after}
}

// sharedWorkspaceChildren lists the children of final and expects n of them, each running
// in final's pod under final's control.
func sharedWorkspaceChildren(ctx context.Context, ns string, final *agentsv1.AgentSession, n int) []agentsv1.AgentSession {
	GinkgoHelper()
	var children agentsv1.AgentSessionList
	Expect(f.Client.List(ctx, &children, client.InNamespace(ns), client.MatchingLabels{agentsv1.LabelParentUID: string(final.UID)})).To(Succeed())
	Expect(children.Items).To(HaveLen(n))
	for _, c := range children.Items {
		Expect(c.Status.PodName).To(Equal(final.Status.PodName), "child %s runs in the parent's pod", c.Name)
		Expect(metav1.IsControlledBy(&c, final)).To(BeTrue(), "child %s is controlled by the parent", c.Name)
	}
	return children.Items
}

// expectChildFiles expects /workspace/out/child-*.txt in pod to hold one line per child
// 1..n, each format with the child's number.
func expectChildFiles(ctx context.Context, ns, pod string, n int, format string) {
	GinkgoHelper()
	res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod,
		Command: []string{"sh", "-c", "cat /workspace/out/child-*.txt"}})
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
	want := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf(format, i))
	}
	Expect(strings.Split(strings.TrimSpace(res.Stdout), "\n")).To(ConsistOf(want),
		"every child's file is in the shared workspace")
}

// fanOutScript is the parent's script: spawn n children one per turn (each turn checks
// the previous spawn's agent id), wait for each (each turn checks the previous child's
// answer), then count the files. Child i writes out/child-<i>.txt, then reads it back until
// it made calls tool calls.
func fanOutScript(parent string, n, calls int) string {
	var b strings.Builder
	b.WriteString("turns:\n")
	expect := func(s string) { fmt.Fprintf(&b, "  - expect: {lastToolResultContains: %q}\n", s) }
	for i := 1; i <= n; i++ {
		if i == 1 {
			b.WriteString("  -")
		} else {
			expect(fmt.Sprintf("%s-sub-%d\"", parent, i-1)) // the closing quote of the agent_id
			b.WriteString("   ")
		}
		fmt.Fprintf(&b, " toolCalls:\n      - name: spawn_agent\n        arguments: {task: \"fan-out task %02d: write out/child-%02d.txt\"}\n", i, i)
	}
	for i := 1; i <= n; i++ {
		if i == 1 {
			expect(fmt.Sprintf("%s-sub-%d\"", parent, n))
		} else {
			expect(fmt.Sprintf("wrote out/child-%02d.txt", i-1))
		}
		fmt.Fprintf(&b, "    toolCalls:\n      - name: wait\n        arguments: {agent_id: %s-sub-%d}\n", parent, i)
	}
	expect(fmt.Sprintf("wrote out/child-%02d.txt", n))
	b.WriteString("    toolCalls:\n      - name: shell\n        arguments: {command: \"ls out | wc -l\"}\n")
	expect(strconv.Itoa(n))
	fmt.Fprintf(&b, "    text: \"All %d children finished.\"\nagents:\n", n)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `  - match: "fan-out task %02[1]d:"
    turns:
      - toolCalls:
          - name: write_file
            arguments: {file_path: out/child-%02[1]d.txt, content: "child %02[1]d\n"}
`, i)
		for range calls - 1 { // the rest of the child's calls read its file back
			fmt.Fprintf(&b, "      - toolCalls:\n          - name: read_file\n            arguments: {file_path: out/child-%02d.txt}\n", i)
		}
		fmt.Fprintf(&b, "      - text: \"wrote out/child-%02d.txt\"\n", i)
	}
	return b.String()
}

// requestCounts are the apiserver_request_total counters by "resource verb".
type requestCounts map[string]float64

var requestTotal = regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)
var metricLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// apiRequests reads the API server's request counters from its /metrics endpoint.
func apiRequests(ctx context.Context) (requestCounts, error) {
	raw, err := f.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read apiserver metrics: %w", err)
	}
	counts := requestCounts{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := requestTotal.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range metricLabel.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		resource := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			resource += "/" + sub
		}
		counts[resource+" "+labels["verb"]] += v
	}
	return counts, nil
}

func (c requestCounts) total() int {
	n := 0.0
	for _, v := range c {
		n += v
	}
	return int(n)
}

// sub returns c minus before.
func (c requestCounts) sub(before requestCounts) requestCounts {
	d := requestCounts{}
	for k, v := range c {
		if v -= before[k]; v > 0 {
			d[k] = v
		}
	}
	return d
}

// agentSessions formats the counts of the agentsessions resource, by verb.
func (c requestCounts) agentSessions() string {
	var parts []string
	for k, v := range c {
		if strings.HasPrefix(k, "agentsessions") {
			parts = append(parts, fmt.Sprintf("%s=%d", k, int(v)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
