package budget

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agent-operator/agent-operator/internal/pricing"
)

func TestTreeSpendIsCheckedAgainstEveryAncestor(t *testing.T) {
	l := New()
	var ended []string
	record := func(ex *Exceeded) { ended = append(ended, ex.Owner+":"+string(ex.Kind)) }
	l.Join(Member{ID: "root", Name: "root", Limit: Limit{Tokens: 1000}}, record)
	l.Join(Member{ID: "mid", Parent: "root", Name: "mid", Limit: Limit{Tokens: 800}}, record)
	l.Join(Member{ID: "leaf", Parent: "mid", Name: "leaf", Limit: Limit{Tokens: 700}}, record)

	l.Charge("root", Spend{Tokens: 300})
	l.Charge("leaf", Spend{Tokens: 600})
	if err := l.Check("leaf"); err != nil {
		t.Fatalf("900 of 1000 spent: %v", err)
	}
	if left, ok := l.Remaining("leaf"); !ok || left.Tokens != 100 {
		t.Errorf("Remaining(leaf) = %+v, %v; want 100 (root's 1000 - 900)", left, ok)
	}
	l.Charge("mid", Spend{Tokens: 150}) // root's tree: 1050 > 1000; mid's: 750 <= 800
	if len(ended) != 1 || ended[0] != "root:tokens" {
		t.Fatalf("ended = %v, want only root (the highest budget crossed)", ended)
	}
	var ex *Exceeded
	if err := l.Check("leaf"); !errors.As(err, &ex) || ex.Owner != "root" {
		t.Errorf("Check(leaf) = %v, want root's crossing", err)
	}
	l.Charge("leaf", Spend{Tokens: 200}) // leaf 800 > 700, mid 950 > 800: both below root, already over
	if len(ended) != 2 || ended[1] != "mid:tokens" {
		t.Errorf("ended = %v, want mid told next (the highest new crossing), leaf left to Check", ended)
	}
	if s, _ := l.Tree("root"); s.Tokens != 1250 {
		t.Errorf("root tree = %d, want 1250", s.Tokens)
	}
}

func TestCostBudget(t *testing.T) {
	l := New()
	var got *Exceeded
	dollars := func(s string) pricing.Amount { a, _ := pricing.ParseAmount(s); return a }
	l.Join(Member{ID: "r", Name: "ns/r", Limit: Limit{Cost: dollars("1.00")}}, func(e *Exceeded) { got = e })
	l.Charge("r", Spend{Tokens: 10, Cost: dollars("1.00")})
	if got != nil {
		t.Fatalf("spending the budget exactly crossed it: %v", got)
	}
	l.Charge("r", Spend{Cost: 1})
	if got == nil || got.Kind != Cost || got.Error() != "the cost budget of ns/r (1.000000) is used up: its session tree spent 1.000000" {
		t.Errorf("got %v", got)
	}
}

// A parent restored after a restart counts its children from their status;
// a child that joins later replaces that figure with its own, not adds to it.
func TestJoinReplacesStatusFigures(t *testing.T) {
	l := New()
	l.Join(Member{ID: "p", Name: "p", Limit: Limit{Tokens: 100}, Own: Spend{Tokens: 10},
		Children: map[string]Spend{"done": {Tokens: 20}, "live": {Tokens: 30}}}, nil)
	if s, _ := l.Tree("p"); s.Tokens != 60 {
		t.Fatalf("tree = %d, want 60", s.Tokens)
	}
	l.Join(Member{ID: "live", Parent: "p", Name: "live", Own: Spend{Tokens: 35}}, nil) // status lagged
	if s, _ := l.Tree("p"); s.Tokens != 65 {
		t.Fatalf("tree = %d, want 65 (30 replaced by 35)", s.Tokens)
	}
	// The other order: the child is back first, then the parent.
	l2 := New()
	l2.Join(Member{ID: "live", Parent: "p", Name: "live", Own: Spend{Tokens: 35}}, nil)
	l2.Join(Member{ID: "p", Name: "p", Own: Spend{Tokens: 10}, Children: map[string]Spend{"live": {Tokens: 30}}}, nil)
	if s, _ := l2.Tree("p"); s.Tokens != 45 {
		t.Fatalf("tree = %d, want 45 (the ledger's 35, not status's 30)", s.Tokens)
	}
}

// An idle ancestor no runner drives still bounds its running descendants,
// and is dropped once none of them is left.
func TestPassiveAncestorBoundsAndIsPruned(t *testing.T) {
	l := New()
	l.AddPassive(Member{ID: "root", Name: "root", Limit: Limit{Tokens: 50}, Own: Spend{Tokens: 40}})
	leave := l.Join(Member{ID: "c", Parent: "root", Name: "c"}, nil)
	l.Charge("c", Spend{Tokens: 11})
	if err := l.Check("c"); err == nil {
		t.Fatal("the idle root's budget did not apply")
	}
	leave()
	leave() // idempotent
	if n := l.Len(); n != 0 {
		t.Errorf("%d nodes left after the last runner left, want 0", n)
	}
}

// A parent that goes idle while its child runs stays as a passive node.
func TestLeavingParentStaysForItsChildren(t *testing.T) {
	l := New()
	leaveP := l.Join(Member{ID: "p", Name: "p", Limit: Limit{Tokens: 10}}, nil)
	leaveC := l.Join(Member{ID: "c", Parent: "p", Name: "c"}, nil)
	leaveP()
	l.Charge("c", Spend{Tokens: 11})
	if err := l.Check("c"); err == nil {
		t.Fatal("the parent's budget was forgotten when it went idle")
	}
	leaveC()
	if l.Len() != 0 {
		t.Errorf("%d nodes left", l.Len())
	}
}

// Concurrent children charging at once: every charge is counted, and the
// root is told exactly once.
func TestConcurrentChildren(t *testing.T) {
	l := New()
	var told atomic.Int32
	l.Join(Member{ID: "root", Name: "root", Limit: Limit{Tokens: 5000}}, func(*Exceeded) { told.Add(1) })
	var wg sync.WaitGroup
	for i := range 20 {
		id := string(rune('a' + i))
		l.Join(Member{ID: id, Parent: "root", Name: id}, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				l.Charge(id, Spend{Tokens: 10})
			}
		}()
	}
	wg.Wait()
	if s, _ := l.Tree("root"); s.Tokens != 10000 {
		t.Errorf("tree = %d, want 10000", s.Tokens)
	}
	if told.Load() != 1 {
		t.Errorf("root told %d times, want 1", told.Load())
	}
}

func TestRemainingAndNarrow(t *testing.T) {
	for _, tc := range []struct {
		limit Limit
		spent Spend
		want  Limit
		ok    bool
	}{
		{Limit{}, Spend{Tokens: 99}, Limit{}, true},
		{Limit{Tokens: 100}, Spend{Tokens: 40}, Limit{Tokens: 60}, true},
		{Limit{Tokens: 100}, Spend{Tokens: 100}, Limit{Tokens: 1}, false},
		{Limit{Cost: 5}, Spend{Cost: 7}, Limit{Cost: 1}, false},
	} {
		got, ok := tc.limit.Remaining(tc.spent)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%+v.Remaining(%+v) = %+v, %v; want %+v, %v", tc.limit, tc.spent, got, ok, tc.want, tc.ok)
		}
	}
	if got := (Limit{Tokens: 10}).Narrow(Limit{Tokens: 5, Cost: 3}); got != (Limit{Tokens: 5, Cost: 3}) {
		t.Errorf("Narrow = %+v", got)
	}
}

// A budget raised after it was crossed (spec.limits is mutable) lets the
// session run again once it rejoins.
func TestRaisedBudgetClearsTheCrossing(t *testing.T) {
	l := New()
	l.Join(Member{ID: "s", Name: "s", Limit: Limit{Tokens: 10}}, nil)
	l.Charge("s", Spend{Tokens: 11})
	if l.Check("s") == nil {
		t.Fatal("not crossed")
	}
	l.Join(Member{ID: "s", Name: "s", Limit: Limit{Tokens: 100}, Own: Spend{Tokens: 11}}, nil)
	if err := l.Check("s"); err != nil {
		t.Errorf("still refused after the budget was raised: %v", err)
	}
}
