// Package budget enforces token and cost budgets across a tree of sessions:
// a session's budget bounds what it and all its descendants spend together.
//
// A Ledger holds, per session, what the session itself spent and the last
// known spend of each of its children's trees, so the spend of any subtree
// is known at once and a charge is checked against every ancestor's limit.
// Sessions whose runner is active join the ledger; an ancestor that is not
// running (idle, or not restored yet) is added as a passive node, so its
// limit still applies to the descendants that run.
//
// The ledger lives in one manager process: every session of a tree is
// driven by the same install (children carry their parent's class), so one
// ledger sees the whole tree. It is rebuilt from the sessions' journals and
// status after a restart.
package budget

import (
	"fmt"
	"sync"

	"github.com/agent-operator/agent-operator/internal/pricing"
)

// Spend is tokens (input + output) and cost.
type Spend struct {
	Tokens int64
	Cost   pricing.Amount
}

// Add returns s + o.
func (s Spend) Add(o Spend) Spend { return Spend{s.Tokens + o.Tokens, s.Cost + o.Cost} }

// Sub returns s - o.
func (s Spend) Sub(o Spend) Spend { return Spend{s.Tokens - o.Tokens, s.Cost - o.Cost} }

// Limit is a budget; a zero field is unlimited.
type Limit struct {
	Tokens int64
	Cost   pricing.Amount
}

// Kind says which budget a session crossed.
type Kind string

// Kinds of budget.
const (
	Tokens Kind = "tokens"
	Cost   Kind = "cost"
)

// Exceeded reports that the tree of session Owner (its Member.Name) spent
// its Kind budget.
type Exceeded struct {
	Owner string // the session whose budget was crossed
	Kind  Kind
	Limit Limit
	Spent Spend
}

func (e *Exceeded) Error() string {
	if e.Kind == Cost {
		return fmt.Sprintf("the cost budget of %s (%s) is used up: its session tree spent %s", e.Owner, e.Limit.Cost, e.Spent.Cost)
	}
	return fmt.Sprintf("the token budget of %s (%d) is used up: its session tree spent %d tokens", e.Owner, e.Limit.Tokens, e.Spent.Tokens)
}

// over reports which budget spent crosses, if any. A budget is crossed when
// the spend exceeds it: a tree may use its budget exactly.
func (l Limit) over(spent Spend) (Kind, bool) {
	switch {
	case l.Tokens > 0 && spent.Tokens > l.Tokens:
		return Tokens, true
	case l.Cost > 0 && spent.Cost > l.Cost:
		return Cost, true
	}
	return "", false
}

// Remaining is what is left of l after spent: a zero field stays
// unlimited, a used-up one is 1 (the smallest budget; the next call
// crosses it). ok is false when nothing is left of a limited budget.
func (l Limit) Remaining(spent Spend) (left Limit, ok bool) {
	ok = true
	if l.Tokens > 0 {
		left.Tokens = l.Tokens - spent.Tokens
		if left.Tokens <= 0 {
			left.Tokens, ok = 1, false
		}
	}
	if l.Cost > 0 {
		left.Cost = l.Cost - spent.Cost
		if left.Cost <= 0 {
			left.Cost, ok = 1, false
		}
	}
	return left, ok
}

// Narrow returns the tighter of l and o per field (zero is unlimited).
func (l Limit) Narrow(o Limit) Limit {
	tight := func(a, b int64) int64 {
		switch {
		case a == 0:
			return b
		case b == 0:
			return a
		}
		return min(a, b)
	}
	return Limit{Tokens: tight(l.Tokens, o.Tokens), Cost: pricing.Amount(tight(int64(l.Cost), int64(o.Cost)))}
}

type node struct {
	id, parent string
	name       string
	limit      Limit
	own        Spend            // what the session itself spent
	kids       map[string]Spend // last known tree spend of each child
	tree       Spend            // own + sum of kids
	active     bool             // a runner drives it (Join); else passive
	onExceed   func(*Exceeded)
	exceeded   *Exceeded // the first crossing of its own budget, reported once
}

// Ledger is the spend of session trees. It is safe for concurrent use.
type Ledger struct {
	mu    sync.Mutex
	nodes map[string]*node
}

// New returns an empty ledger.
func New() *Ledger { return &Ledger{nodes: map[string]*node{}} }

// Has reports whether session id is in the ledger (active or passive).
func (l *Ledger) Has(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nodes[id] != nil
}

// Member describes a session joining the ledger.
type Member struct {
	ID, Parent string // Parent is empty for a root
	// Name names the session in messages (namespace/name).
	Name  string
	Limit Limit
	// Own is what the session itself has spent so far (its journal).
	Own Spend
	// Children is the last known tree spend of each child (their status);
	// children that are in the ledger count with the ledger's figure.
	Children map[string]Spend
}

// Join adds an active session, or makes a passive one active, and returns
// the function that leaves. onExceed is called (once, without the ledger's
// lock) when a charge makes the session's own tree cross its budget.
func (l *Ledger) Join(m Member, onExceed func(*Exceeded)) (leave func()) {
	l.put(m, true, onExceed)
	var once sync.Once
	return func() { once.Do(func() { l.leave(m.ID) }) }
}

// AddPassive adds an ancestor that no runner drives, so its limit applies
// to its running descendants. It does nothing if id is already present.
func (l *Ledger) AddPassive(m Member) {
	l.mu.Lock()
	present := l.nodes[m.ID] != nil
	l.mu.Unlock()
	if !present {
		l.put(m, false, nil)
	}
}

func (l *Ledger) put(m Member, active bool, onExceed func(*Exceeded)) {
	l.mu.Lock()
	n := l.nodes[m.ID]
	if n == nil {
		n = &node{id: m.ID, kids: map[string]Spend{}}
		l.nodes[m.ID] = n
	}
	n.parent, n.limit, n.name = m.Parent, m.Limit, m.Name
	if active {
		n.active, n.onExceed = true, onExceed
	}
	n.own = m.Own
	for id, s := range m.Children {
		if l.nodes[id] == nil { // the ledger's own figure wins
			n.kids[id] = s
		}
	}
	for id, k := range l.nodes { // children already present, e.g. joined first
		if k.parent == m.ID {
			n.kids[id] = k.tree
		}
	}
	n.tree = n.own
	for _, s := range n.kids {
		n.tree = n.tree.Add(s)
	}
	if _, over := n.limit.over(n.tree); !over {
		n.exceeded = nil // the budget was raised (spec.limits is mutable)
	}
	h := l.propagate(n)
	if active && h.ex == nil && n.exceeded != nil {
		h = hit{ex: n.exceeded, fn: onExceed} // crossed while it was passive
	}
	l.mu.Unlock()
	h.report()
}

// leave makes id passive; nodes no longer needed are dropped.
func (l *Ledger) leave(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.nodes[id]; n != nil {
		n.active, n.onExceed = false, nil
		l.prune(n)
	}
}

// prune drops n and then its ancestors while each is passive and has no
// node below it in the ledger: a passive ancestor is kept only for the
// running descendants it bounds. The figures a dropped node held live on in
// the parent's kids.
func (l *Ledger) prune(n *node) {
	for n != nil && !n.active && !l.hasKidNodes(n.id) {
		delete(l.nodes, n.id)
		n = l.nodes[n.parent]
	}
}

func (l *Ledger) hasKidNodes(id string) bool {
	for _, k := range l.nodes {
		if k.parent == id {
			return true
		}
	}
	return false
}

// hit is a crossing found under the lock, reported after it is released.
type hit struct {
	ex *Exceeded
	fn func(*Exceeded)
}

func (h hit) report() {
	if h.ex != nil && h.fn != nil {
		h.fn(h.ex)
	}
}

// propagate carries n's tree (already updated) up to its ancestors, each
// of which holds the last figure of each child's tree, and returns the
// first new crossing from the top: the highest session whose budget the
// change crossed is the one that ends.
func (l *Ledger) propagate(n *node) hit {
	chain := []*node{n}
	for c, p := n, l.nodes[n.parent]; p != nil; c, p = p, l.nodes[p.parent] {
		p.tree = p.tree.Add(c.tree.Sub(p.kids[c.id]))
		p.kids[c.id] = c.tree
		chain = append(chain, p)
	}
	var h hit
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		if c.exceeded != nil {
			continue
		}
		if kind, over := c.limit.over(c.tree); over {
			c.exceeded = &Exceeded{Owner: c.name, Kind: kind, Limit: c.limit, Spent: c.tree}
			if h.ex == nil && c.active {
				h = hit{ex: c.exceeded, fn: c.onExceed}
			}
		}
	}
	return h
}

// Charge adds what session id spent (one model call) to it and its
// ancestors. The highest active session whose budget this crosses is told
// through its onExceed.
func (l *Ledger) Charge(id string, s Spend) {
	l.mu.Lock()
	n := l.nodes[id]
	if n == nil {
		l.mu.Unlock()
		return
	}
	n.own = n.own.Add(s)
	n.tree = n.tree.Add(s)
	h := l.propagate(n)
	l.mu.Unlock()
	h.report()
}

// Check returns the *Exceeded of the highest session, id or an ancestor,
// whose tree has crossed its budget: id must not start another model call.
func (l *Ledger) Check(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found *Exceeded
	for n := l.nodes[id]; n != nil; n = l.nodes[n.parent] {
		if n.exceeded != nil {
			found = n.exceeded
		}
	}
	if found == nil {
		return nil
	}
	return found
}

// Remaining is what a new child of id may spend: for id and each ancestor,
// its limit minus its tree's spend, the tightest of them. ok is false when
// some budget is already used up.
func (l *Ledger) Remaining(id string) (left Limit, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = true
	for n := l.nodes[id]; n != nil; n = l.nodes[n.parent] {
		r, rok := n.limit.Remaining(n.tree)
		left, ok = left.Narrow(r), ok && rok
	}
	return left, ok
}

// Tree is the spend of id's tree as the ledger knows it.
func (l *Ledger) Tree(id string) (Spend, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nodes[id]
	if n == nil {
		return Spend{}, false
	}
	return n.tree, true
}

// Len is the number of sessions in the ledger (for tests and metrics).
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.nodes)
}
