package agentsession

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

func TestBoundChildren(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	child := func(name string, age time.Duration, phase agentsv1.Phase, tokens int64, cost string) agentsv1.AgentSession {
		return agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-age))},
			Status: agentsv1.AgentSessionStatus{Phase: phase, TreeTokens: tokens, TreeCost: cost}}
	}
	all := []agentsv1.AgentSession{
		child("a-old-done", 5*time.Hour, agentsv1.PhaseSucceeded, 100, "1"),
		child("b-running-old", 6*time.Hour, agentsv1.PhaseRunning, 7, ""),
		child("c-new-done", time.Hour, agentsv1.PhaseFailed, 30, "0.25"),
		child("d-mid-done", 3*time.Hour, agentsv1.PhaseAborted, 20, ""),
		child("e-new", 0, "", 0, ""),
		child("f-waiting", 2*time.Hour, agentsv1.PhaseAwaitingInput, 5, ""),
	}
	cases := []struct {
		name        string
		max         int
		wantListed  []string
		wantOmitted int32
		wantTokens  int64
		wantCost    string
	}{
		{"all fit", 10, []string{"a-old-done", "b-running-old", "c-new-done", "d-mid-done", "e-new", "f-waiting"}, 0, 0, ""},
		{"the oldest ended ones go first", 4, []string{"b-running-old", "c-new-done", "e-new", "f-waiting"}, 2, 120, "1"},
		{"live ones are kept before any ended one", 3, []string{"b-running-old", "e-new", "f-waiting"}, 3, 150, "1.25"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := boundChildren(slices.Clone(all), tc.max)
			var names []string
			for _, c := range got.listed {
				names = append(names, c.Name)
			}
			if !slices.Equal(names, tc.wantListed) {
				t.Errorf("listed %v, want %v", names, tc.wantListed)
			}
			sum := got.summary
			if sum == nil {
				t.Fatal("no summary")
			}
			if sum.Total != 6 || sum.Omitted != tc.wantOmitted || sum.OmittedTreeTokens != tc.wantTokens {
				t.Errorf("summary %+v, want total 6, omitted %d with %d tokens", sum, tc.wantOmitted, tc.wantTokens)
			}
			if !sameAmount(sum.OmittedTreeCost, tc.wantCost) {
				t.Errorf("omittedTreeCost %q, want %q", sum.OmittedTreeCost, tc.wantCost)
			}
			want := map[string]int32{"Pending": 1, "Running": 1, "AwaitingInput": 1, "Succeeded": 1, "Failed": 1, "Aborted": 1}
			if !mapsEqual(sum.Phases, want) {
				t.Errorf("phases %v, want %v", sum.Phases, want)
			}
		})
	}
	if got := boundChildren(nil, 3); got.listed != nil || got.summary != nil {
		t.Errorf("no children: %+v, want nothing", got)
	}
}

// sameAmount compares two decimal amounts ("" is no amount).
func sameAmount(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	x, errA := pricing.ParseAmount(a)
	y, errB := pricing.ParseAmount(b)
	return errA == nil && errB == nil && x == y
}

func mapsEqual(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestTreeFiguresCountOmittedChildren: status.treeTokens and treeCost
// count the children status.children leaves out.
func TestTreeFiguresCountOmittedChildren(t *testing.T) {
	s := &agentsv1.AgentSession{Status: agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning,
		Usage: agentsv1.Usage{Total: 1}, Cost: "0.5", Currency: "USD"}}
	obs := observation{pod: readyPod(),
		children:     []agentsv1.ChildStatus{{Name: "c", TreeTokens: 10, TreeCost: "1"}},
		childSummary: &agentsv1.ChildrenSummary{Total: 3, Omitted: 2, OmittedTreeTokens: 100, OmittedTreeCost: "2"}}
	st := computeStatus(s, obs, metav1.Now())
	if st.TreeTokens != 111 {
		t.Errorf("treeTokens = %d, want 111 (own 1, listed 10, omitted 100)", st.TreeTokens)
	}
	if !sameAmount(st.TreeCost, "3.5") {
		t.Errorf("treeCost = %q, want 3.5 (own 0.5, listed 1, omitted 2)", st.TreeCost)
	}
	if st.ChildrenSummary == nil || st.ChildrenSummary.Total != 3 {
		t.Errorf("childrenSummary = %+v", st.ChildrenSummary)
	}
}

// listRecorder records the options of the Lists made through it.
type listRecorder struct {
	client.Client
	lists []client.ListOptions
}

func (l *listRecorder) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	l.lists = append(l.lists, o)
	return l.Client.List(ctx, list, opts...)
}

// TestQuotaListsWithoutDeepCopies: the quota check reads the namespace's
// sessions from the cache without deep-copying them (it only reads them),
// and still counts the same sessions.
func TestQuotaListsWithoutDeepCopies(t *testing.T) {
	ns := newNamespace(t)
	older := validSession(ns)
	if err := testClient.Create(t.Context(), older); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, older, agentsv1.PhaseProvisioning, nil) // it holds the namespace's one slot
	s := validSession(ns)
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	rec := &listRecorder{Client: testClient}
	r := &Reconciler{Client: rec, MaxSessionsPerNamespace: 1}
	held, err := r.quotaHold(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if held == "" {
		t.Error("the newer session is not held behind the older one (limit 1)")
	}
	if len(rec.lists) != 1 || rec.lists[0].UnsafeDisableDeepCopy == nil || !*rec.lists[0].UnsafeDisableDeepCopy {
		t.Errorf("quota lists %+v, want one List with UnsafeDisableDeepCopy", rec.lists)
	}
}
