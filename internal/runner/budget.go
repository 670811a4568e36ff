package runner

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/budget"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// ledgerID names a session in the budget ledger. A session tree lives in
// one namespace, and parentRef names the parent.
func ledgerID(namespace, name string) string { return namespace + "/" + name }

// limitOf is the budget spec.limits sets.
func limitOf(s *agentsv1.AgentSession) budget.Limit {
	l := budget.Limit{Tokens: s.Spec.Limits.TokenBudget}
	if c := s.Spec.Limits.CostBudget; c != "" {
		l.Cost, _ = pricing.ParseAmount(c) // admission checked the format
	}
	return l
}

// treeFigures are the tree spends status records for s's children.
func treeFigures(s *agentsv1.AgentSession) map[string]budget.Spend {
	kids := make(map[string]budget.Spend, len(s.Status.Children))
	for _, c := range s.Status.Children {
		cost, _ := pricing.ParseAmount(c.TreeCost)
		kids[ledgerID(s.Namespace, c.Name)] = budget.Spend{Tokens: c.TreeTokens, Cost: cost}
	}
	if sum := s.Status.ChildrenSummary; sum != nil && sum.Omitted > 0 {
		// The ended children status.children leaves out, as one figure under
		// a key no session can have ('#' is not allowed in a name).
		cost, _ := pricing.ParseAmount(sum.OmittedTreeCost)
		kids[omittedChildrenID(s.Namespace, s.Name)] = budget.Spend{Tokens: sum.OmittedTreeTokens, Cost: cost}
	}
	return kids
}

// omittedChildrenID is the ledger entry of the children of namespace/name
// that status.children leaves out (status.childrenSummary).
func omittedChildrenID(namespace, name string) string {
	return ledgerID(namespace, name) + "#omitted-children"
}

// checkPriced fails a session that has a cost budget for a model the price
// table cannot price: its budget could never be enforced.
func checkPriced(prices *pricing.Table, s *agentsv1.AgentSession) error {
	if s.Spec.Limits.CostBudget == "" || prices.Known(string(s.Spec.Model.Provider), s.Spec.Model.Name) {
		return nil
	}
	return fmt.Errorf("%w: spec.limits.costBudget is set but the operator's price table has no price for provider %s, model %s: add one to the chart's pricing values or drop the cost budget",
		ErrConfig, s.Spec.Model.Provider, s.Spec.Model.Name)
}

// spendOf is what one model call's usage costs the session.
func (s *session) spendOf(u llm.Usage) budget.Spend {
	cost, _ := s.r.opts.Prices.Cost(string(s.obj.Spec.Model.Provider), s.obj.Spec.Model.Name, u)
	return budget.Spend{Tokens: u.Total(), Cost: cost}
}

// fold applies one event to progress, with its cost; s.mu is held.
func (s *session) fold(ev loop.Event) {
	applyEvent(&s.prog, ev)
	if ev.Kind == loop.EventAssistantTextEnd && ev.Data.Usage != nil {
		s.prog.Cost += s.spendOf(*ev.Data.Usage).Cost
	}
}

// joinBudget enters the session in the runner's ledger with what its
// journal says it spent, after its ancestors that no runner drives here
// (idle ones), so that their budgets bound it too. The returned function
// leaves the ledger.
func (s *session) joinBudget(ctx context.Context) func() {
	s.addAncestors(ctx)
	s.mu.Lock()
	own := budget.Spend{Tokens: s.prog.Usage.Total(), Cost: s.prog.Cost}
	s.mu.Unlock()
	m := budget.Member{
		ID: ledgerID(s.obj.Namespace, s.obj.Name), Name: ledgerID(s.obj.Namespace, s.obj.Name),
		Limit: limitOf(s.obj), Own: own, Children: treeFigures(s.obj),
	}
	if p := s.obj.Spec.ParentRef; p != nil {
		m.Parent = ledgerID(s.obj.Namespace, p.Name)
	}
	return s.r.budgets.Join(m, func(ex *budget.Exceeded) { s.fail(exceededReason(ex), ex.Error()) })
}

// addAncestors adds the ancestors missing from the ledger as passive
// nodes, from the informer cache, nearest first. An ancestor that cannot
// be read ends the walk: its budget then applies once it runs here again.
func (s *session) addAncestors(ctx context.Context) {
	c := s.r.opts.Client
	if c == nil {
		return
	}
	ref := s.obj.Spec.ParentRef
	for depth := 0; ref != nil && depth < 16; depth++ {
		id := ledgerID(s.obj.Namespace, ref.Name)
		if s.r.budgets.Has(id) {
			return
		}
		var p agentsv1.AgentSession
		if err := c.Get(ctx, types.NamespacedName{Namespace: s.obj.Namespace, Name: ref.Name}, &p); err != nil ||
			(ref.UID != "" && string(p.UID) != ref.UID) {
			return
		}
		cost, _ := pricing.ParseAmount(p.Status.Cost)
		m := budget.Member{ID: id, Name: id, Limit: limitOf(&p),
			Own: budget.Spend{Tokens: p.Status.Usage.Total, Cost: cost}, Children: treeFigures(&p)}
		if p.Spec.ParentRef != nil {
			m.Parent = ledgerID(p.Namespace, p.Spec.ParentRef.Name)
		}
		s.r.budgets.AddPassive(m)
		ref = p.Spec.ParentRef
	}
}

func exceededReason(ex *budget.Exceeded) string {
	if ex.Kind == budget.Cost {
		return agentsv1.ReasonCostBudgetExceeded
	}
	return agentsv1.ReasonTokenBudgetExceeded
}

// budgetedClient refuses to start a model call once the session's tree, or
// the tree of an ancestor, has used up its budget: the session fails with
// that budget's reason instead. So a tree overshoots its budget by at most
// the model calls in flight when it was crossed, one per running session.
type budgetedClient struct {
	loop.Client
	s *session
}

func (c budgetedClient) refuse() error {
	err := c.s.r.budgets.Check(ledgerID(c.s.obj.Namespace, c.s.obj.Name))
	var ex *budget.Exceeded
	if !errors.As(err, &ex) {
		return nil
	}
	c.s.fail(exceededReason(ex), ex.Error())
	return fmt.Errorf("model call refused: %w", err)
}

func (c budgetedClient) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := c.refuse(); err != nil {
		return nil, err
	}
	return c.Client.Complete(ctx, req)
}

func (c budgetedClient) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	if err := c.refuse(); err != nil {
		return func(yield func(llm.StreamEvent, error) bool) { yield(llm.StreamEvent{}, err) }
	}
	return c.Client.Stream(ctx, req)
}
