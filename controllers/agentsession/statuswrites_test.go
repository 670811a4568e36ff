package agentsession

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

func TestDeferStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	running := agentsv1.AgentSessionStatus{
		Phase: agentsv1.PhaseRunning, Turns: 3, ToolCalls: 5, TreeTokens: 100, Cost: "0.1", TreeCost: "0.2",
		Usage:           agentsv1.Usage{Input: 60, Output: 40, Total: 100},
		Conditions:      []metav1.Condition{{Type: agentsv1.ConditionReady, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonRunning}},
		Children:        []agentsv1.ChildStatus{{Name: "c1", Phase: agentsv1.PhaseRunning, TreeTokens: 10, TreeCost: "0.01"}},
		ChildrenSummary: &agentsv1.ChildrenSummary{Total: 1, Phases: map[string]int32{"Running": 1}},
	}
	change := func(f func(*agentsv1.AgentSessionStatus)) *agentsv1.AgentSessionStatus {
		st := running.DeepCopy()
		f(st)
		return st
	}
	counters := change(func(st *agentsv1.AgentSessionStatus) {
		st.Turns, st.ToolCalls, st.Usage.Total, st.TreeTokens, st.Cost = 4, 7, 180, 180, "0.2"
		st.LastEventSequence, st.WorkingTime = 42, &metav1.Duration{Duration: time.Minute}
	})
	cases := []struct {
		name      string
		new       *agentsv1.AgentSessionStatus
		lastWrite time.Time
		now       time.Time
		interval  time.Duration
		want      time.Duration
	}{
		{"counters soon after a write wait the rest of the interval", counters, t0, t0.Add(2 * time.Second), interval, 3 * time.Second},
		{"counters an interval after a write go at once", counters, t0, t0.Add(interval), interval, 0},
		{"counters long after a write go at once", counters, t0, t0.Add(time.Hour), interval, 0},
		{"counters with nothing written yet go at once", counters, time.Time{}, t0, interval, 0},
		{"counters with interval 0 go at once", counters, t0, t0.Add(time.Millisecond), 0, 0},
		{"counters after the clock stepped back wait one interval, never more", counters, t0, t0.Add(-time.Hour), interval, interval},
		{"result text waits", change(func(st *agentsv1.AgentSessionStatus) { st.Result = "half done" }), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"plan waits", change(func(st *agentsv1.AgentSessionStatus) {
			st.Plan = []agentsv1.PlanStep{{Content: "step"}}
		}), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"context waits", change(func(st *agentsv1.AgentSessionStatus) {
			st.Context = &agentsv1.ContextStatus{Window: 1000, LastRequestTokens: 10}
		}), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"a child's tree figures wait", change(func(st *agentsv1.AgentSessionStatus) {
			st.Children[0].TreeTokens, st.Children[0].TreeCost, st.TreeTokens = 50, "0.05", 140
		}), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"omitted children's figures wait", change(func(st *agentsv1.AgentSessionStatus) {
			st.ChildrenSummary.OmittedTreeTokens, st.ChildrenSummary.OmittedTreeCost = 7, "1"
		}), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"a phase change goes at once", change(func(st *agentsv1.AgentSessionStatus) {
			st.Phase, st.Turns = agentsv1.PhaseAwaitingInput, 9
		}), t0, t0.Add(time.Second), interval, 0},
		{"a final phase goes at once", change(func(st *agentsv1.AgentSessionStatus) { st.Phase = agentsv1.PhaseFailed }), t0, t0.Add(time.Second), interval, 0},
		{"counters of an ended session go at once", change(func(st *agentsv1.AgentSessionStatus) {
			st.Phase = agentsv1.PhaseSucceeded
		}), t0, t0.Add(time.Second), interval, 0},
		{"a condition change goes at once", change(func(st *agentsv1.AgentSessionStatus) {
			st.Conditions[0].Message, st.Turns = "waiting for the model", 9
		}), t0, t0.Add(time.Second), interval, 0},
		{"a child's phase in the list waits", change(func(st *agentsv1.AgentSessionStatus) {
			st.Children[0].Phase = agentsv1.PhaseSucceeded
			st.ChildrenSummary.Phases = map[string]int32{"Succeeded": 1}
		}), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"a new child in the list waits", change(func(st *agentsv1.AgentSessionStatus) {
			st.Children = append(st.Children, agentsv1.ChildStatus{Name: "c2"})
			st.ChildrenSummary.Total = 2
		}), t0, t0.Add(time.Second), interval, 4 * time.Second},
		{"a list change of an ending parent goes at once", change(func(st *agentsv1.AgentSessionStatus) {
			st.Phase, st.Children = agentsv1.PhaseAborted, nil
		}), t0, t0.Add(time.Second), interval, 0},
		{"a delivered message goes at once", change(func(st *agentsv1.AgentSessionStatus) {
			st.MessagesDelivered = []string{"m1"}
		}), t0, t0.Add(time.Second), interval, 0},
		{"the pod name goes at once", change(func(st *agentsv1.AgentSessionStatus) { st.PodName = "p" }), t0, t0.Add(time.Second), interval, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := deferStatus(&running, tc.new, tc.lastWrite, tc.now, tc.interval); got != tc.want {
				t.Errorf("deferStatus = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestStatusWritesAfterAClockStepBack: a clock that stepped back behind
// the last write defers a progress write by one interval, then lets it go
// (it does not wait for the clock to catch up with the old write).
func TestStatusWritesAfterAClockStepBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	old := &agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning, Turns: 1}
	new := &agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning, Turns: 2}
	var w statusWrites
	w.wrote(key, old, t0)
	back := t0.Add(-time.Hour)
	if got := w.wait(key, old, new, back, 5*time.Second); got != 5*time.Second {
		t.Fatalf("wait after the step back = %s, want one interval", got)
	}
	if got := w.wait(key, old, new, back.Add(5*time.Second), 5*time.Second); got != 0 {
		t.Errorf("wait one interval after the step back = %s, want 0", got)
	}
	w.wrote(key, &agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseSucceeded}, t0)
	if n := w.size(); n != 0 {
		t.Errorf("%d sessions remembered after the session ended, want 0", n)
	}
}

// TestSameStatus: statuses are the same when the API server would store
// them alike: a time kept to the nanosecond in memory equals the same time
// read back to the second, so such a status is not written again (an empty
// patch) and does not make a progress change look like more.
func TestSameStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	recorded := func(at time.Time) *agentsv1.AgentSessionStatus {
		return &agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning, Turns: 1,
			Changes: &agentsv1.Changes{Head: "h", RecordedTime: ptrTime(metav1.NewTime(at))}}
	}
	withTurns := func(st *agentsv1.AgentSessionStatus, n int32) *agentsv1.AgentSessionStatus {
		st.Turns = n
		return st
	}
	cases := []struct {
		name             string
		old, new         *agentsv1.AgentSessionStatus
		same, progressOK bool
	}{
		{"equal", recorded(t0), recorded(t0), true, true},
		{"a time read back to the second", recorded(t0), recorded(t0.Add(500 * time.Millisecond)), true, true},
		{"a time a second later", recorded(t0), recorded(t0.Add(time.Second)), false, false},
		{"a nil list and an empty one", &agentsv1.AgentSessionStatus{}, &agentsv1.AgentSessionStatus{MessagesDelivered: []string{}}, true, true},
		{"counters beside a time read back", recorded(t0), withTurns(recorded(t0.Add(500*time.Millisecond)), 2), false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameStatus(tc.old, tc.new); got != tc.same {
				t.Errorf("sameStatus = %t, want %t", got, tc.same)
			}
			if got := progressOnly(tc.old, tc.new); got != tc.progressOK {
				t.Errorf("progressOnly = %t, want %t", got, tc.progressOK)
			}
		})
	}
}

// TestEndHeld: a status that makes the session final is held while the
// runner driving it has not ended; everything else, and the end once the
// runner ended (or without a runner), is not.
func TestEndHeld(t *testing.T) {
	st := func(p agentsv1.Phase) *agentsv1.AgentSessionStatus { return &agentsv1.AgentSessionStatus{Phase: p} }
	live := &runner.Progress{Phase: agentsv1.PhaseSucceeded}
	ended := &runner.Progress{Phase: agentsv1.PhaseSucceeded, Done: true}
	cases := []struct {
		name     string
		old, new agentsv1.Phase
		p        *runner.Progress
		want     bool
	}{
		{"Succeeded while the runner ends", agentsv1.PhaseRunning, agentsv1.PhaseSucceeded, live, true},
		{"Failed while the runner ends", agentsv1.PhaseRunning, agentsv1.PhaseFailed, live, true},
		{"Aborted while the runner stops", agentsv1.PhaseRunning, agentsv1.PhaseAborted, live, true},
		{"Succeeded once the runner ended", agentsv1.PhaseRunning, agentsv1.PhaseSucceeded, ended, false},
		{"a final phase without a runner", agentsv1.PhaseProvisioning, agentsv1.PhaseFailed, nil, false},
		{"progress while running", agentsv1.PhaseRunning, agentsv1.PhaseRunning, live, false},
		{"AwaitingInput is not an end", agentsv1.PhaseRunning, agentsv1.PhaseAwaitingInput, live, false},
		{"already final: a restored runner's figures", agentsv1.PhaseSucceeded, agentsv1.PhaseSucceeded, live, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := endHeld(st(tc.old), st(tc.new), tc.p); got != tc.want {
				t.Errorf("endHeld = %t, want %t", got, tc.want)
			}
		})
	}
}
