package runner

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/budget"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// TestTreeFiguresCountOmittedChildren: the children status.children leaves
// out (status.childrenSummary) still count toward the parent's tree in the
// budget ledger, so bounding the list never frees budget.
func TestTreeFiguresCountOmittedChildren(t *testing.T) {
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Status: agentsv1.AgentSessionStatus{
			Children: []agentsv1.ChildStatus{{Name: "p-sub-9", TreeTokens: 10, TreeCost: "0.5"}},
			ChildrenSummary: &agentsv1.ChildrenSummary{Total: 9, Omitted: 8,
				OmittedTreeTokens: 800, OmittedTreeCost: "4"},
		}}
	got := treeFigures(s)
	var sum budget.Spend
	for _, sp := range got {
		sum = sum.Add(sp)
	}
	wantCost, _ := pricing.ParseAmount("4.5")
	if len(got) != 2 || sum.Tokens != 810 || sum.Cost != wantCost {
		t.Errorf("treeFigures = %v (sum %+v), want the listed child and the omitted ones: 810 tokens, 4.5", got, sum)
	}
	if _, ok := got[ledgerID("ns", "p-sub-9")]; !ok {
		t.Errorf("treeFigures = %v: the listed child lost its own entry", got)
	}
}
