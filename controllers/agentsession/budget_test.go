package agentsession

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/metrics"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// suiteRegistry holds the metrics of the suite's controller (suiteMetrics,
// a real metrics.Recorder), read by metricSum.
var (
	suiteRegistry = prometheus.NewRegistry()
	suiteMetrics  *metrics.Recorder
)

// metricSum is the sum of the samples of the suite's metric name whose
// labels include every pair of match.
func metricSum(t *testing.T, name string, match map[string]string) float64 {
	t.Helper()
	families, err := suiteRegistry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	sample:
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue sample
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// suitePrices prices the scripted model "priced" at $1 per million input
// and $2 per million output tokens, so cost can be tested without a
// provider; every other scripted model stays free.
var suitePrices = func() *pricing.Table {
	t, err := pricing.Parse([]byte(`models: [{provider: scripted, model: priced, input: "1", output: "2"}]`))
	if err != nil {
		panic(err)
	}
	return t
}()

// treeScript is a 3-level tree: the root spawns two children and waits for
// both; each child spawns a grandchild and then, like the grandchild, keeps
// calling the model (turns of 100 tokens each) far past any budget.
func treeScript(root string) string {
	var b strings.Builder
	busy := func(indent string, n int) {
		for range n {
			fmt.Fprintf(&b, "%s- usage: {inputTokens: 90, outputTokens: 10}\n%s  toolCalls: [{name: shell, arguments: {command: \"true\"}}]\n", indent, indent)
		}
		fmt.Fprintf(&b, "%s- text: done\n", indent)
	}
	fmt.Fprintf(&b, `turns:
  - toolCalls:
      - {name: spawn_agent, arguments: {task: "child A"}}
      - {name: spawn_agent, arguments: {task: "child B"}}
  - toolCalls:
      - {name: wait, arguments: {agent_id: %[1]s-sub-1}}
      - {name: wait, arguments: {agent_id: %[1]s-sub-2}}
  - text: all done
agents:
`, root)
	for _, c := range []string{"A", "B"} {
		fmt.Fprintf(&b, "  - match: \"child %s\"\n    turns:\n      - toolCalls: [{name: spawn_agent, arguments: {task: \"grandchild %s\"}}]\n", c, c)
		busy("      ", 30)
		fmt.Fprintf(&b, "  - match: \"grandchild %s\"\n    turns:\n", c)
		busy("      ", 30)
	}
	return b.String()
}

// TestTreeBudgetStopsTheTree: a 3-level tree with concurrent children
// spends against the root's token budget. The root, whose budget is
// crossed, fails with TokenBudgetExceeded; every descendant stops; and the
// tree spends at most one in-flight model call per running session past the
// budget.
func TestTreeBudgetStopsTheTree(t *testing.T) {
	cases := []struct {
		name, model, reason string
		limits              agentsv1.Limits
		// bound is what the tree may spend at most: the budget plus one
		// call (100 tokens / $0.00011) per session of the five.
		overTokens func(s *agentsv1.AgentSession, tree int64, cost pricing.Amount) error
	}{
		{"tokens", "demo", agentsv1.ReasonTokenBudgetExceeded, agentsv1.Limits{TokenBudget: 1000},
			func(s *agentsv1.AgentSession, tree int64, _ pricing.Amount) error {
				if tree <= 1000 || tree > 1000+5*100 {
					return fmt.Errorf("tree spent %d tokens, want more than the budget of 1000 and at most 1500", tree)
				}
				return nil
			}},
		{"cost", "priced", agentsv1.ReasonCostBudgetExceeded, agentsv1.Limits{CostBudget: "0.001"},
			func(s *agentsv1.AgentSession, _ int64, cost pricing.Amount) error {
				// A call costs 90*$1/M + 10*$2/M = $0.00011.
				if cost <= 1_000_000 || cost > 1_000_000+5*110_000 {
					return fmt.Errorf("tree cost %s, want more than the budget of 0.001 and at most 0.00155", cost)
				}
				if s.Status.Currency != "USD" || s.Status.Cost == "" {
					return fmt.Errorf("root cost %q currency %q", s.Status.Cost, s.Status.Currency)
				}
				return nil
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			root := uniqueName("budget")
			s := scriptedParent(t, ns, root, treeScript(root), func(s *agentsv1.AgentSession) {
				s.Spec.Model.Name = tc.model
				s.Spec.Limits = tc.limits
				s.Spec.Subagents.MaxDepth = ptr.To[int32](2)
			})
			got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
			if completedReason(got) != tc.reason {
				t.Fatalf("root ended %s/%s (%s), want reason %s", got.Status.Phase, completedReason(got), got.Status.Error, tc.reason)
			}
			names := []string{root, root + "-sub-1", root + "-sub-2", root + "-sub-1-sub-1", root + "-sub-2-sub-1"}
			var tree int64
			var cost pricing.Amount
			eventually(t, "every session of the tree stopped", func() error {
				tree, cost = 0, 0
				for _, n := range names {
					g := &agentsv1.AgentSession{}
					if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: n}, g); apierrors.IsNotFound(err) && n != root {
						continue // the tree stopped before this one was spawned
					} else if err != nil {
						return err
					}
					if !g.Status.Phase.IsFinal() || g.Status.Phase == agentsv1.PhaseSucceeded {
						return fmt.Errorf("%s is %s/%s", n, g.Status.Phase, completedReason(g))
					}
					tree += g.Status.Usage.Total
					c, _ := pricing.ParseAmount(g.Status.Cost)
					cost += c
				}
				return nil
			})
			for _, n := range names[1:] {
				g := &agentsv1.AgentSession{}
				if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: n}, g); err != nil {
					continue
				}
				if r := completedReason(g); r != tc.reason && r != agentsv1.ReasonAborted {
					t.Errorf("%s ended %s/%s (%s), want %s or Aborted", n, g.Status.Phase, r, g.Status.Error, tc.reason)
				}
			}
			// Children were created with at most what the root had left.
			if c := getSession(t, ns, root+"-sub-1"); c.Spec.Limits.TokenBudget > 1000 || (tc.limits.CostBudget != "" && c.Spec.Limits.CostBudget == "") {
				t.Errorf("child limits %+v are not narrowed", c.Spec.Limits)
			}
			t.Logf("tree spent %d tokens, cost %s", tree, cost)
			if err := tc.overTokens(getSession(t, ns, root), tree, cost); err != nil {
				t.Error(err)
			}
			// The root's end is counted once in the sessions_ended metric, with its reason.
			eventually(t, "the root's end counted", func() error {
				if n := metricSum(t, "agent_operator_sessions_ended_total", map[string]string{"namespace": ns, "phase": "Failed", "reason": tc.reason}); n < 1 {
					return fmt.Errorf("sessions_ended_total{reason=%s} = %v", tc.reason, n)
				}
				return nil
			})
		})
	}
}
