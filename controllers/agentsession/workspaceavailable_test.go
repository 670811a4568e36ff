package agentsession

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// WorkspaceAvailable is False while the runner says a tool call waits for
// the workspace's stream, True once it no longer does after a wait, and
// absent on a session that never waited.
func TestWorkspaceAvailableCondition(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	since := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	waited := []metav1.Condition{{Type: agentsv1.ConditionWorkspaceAvailable, Status: metav1.ConditionFalse,
		Reason: agentsv1.ReasonWorkspaceUnreachable}}
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		progress   runner.Progress
		want       metav1.ConditionStatus // "": no condition
		wantReason string
		wantIn     []string
	}{
		{"never waited", nil, runner.Progress{Phase: agentsv1.PhaseRunning, JournalAvailable: true}, "", "", nil},
		{"a call waits", nil, runner.Progress{Phase: agentsv1.PhaseRunning, JournalAvailable: true,
			WorkspaceUnavailable: "the server is currently unable to handle the request", WorkspaceUnavailableSince: since},
			metav1.ConditionFalse, agentsv1.ReasonWorkspaceUnreachable,
			[]string{"since 2026-01-02T03:00:00Z", "unable to handle the request"}},
		{"the stream opened after the wait", waited, runner.Progress{Phase: agentsv1.PhaseRunning, JournalAvailable: true},
			metav1.ConditionTrue, agentsv1.ReasonWorkspaceReachable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Generation: 3},
				Status: agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning, StartTime: &now, Conditions: tc.conditions}}
			p := tc.progress
			st := computeStatus(s, observation{pod: readyPod(), progress: &p}, now)
			c := meta.FindStatusCondition(st.Conditions, agentsv1.ConditionWorkspaceAvailable)
			if tc.want == "" {
				if c != nil {
					t.Fatalf("condition = %+v, want none", c)
				}
				return
			}
			if c == nil || c.Status != tc.want || c.Reason != tc.wantReason {
				t.Fatalf("condition = %+v, want %s/%s", c, tc.want, tc.wantReason)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q lacks %q", c.Message, w)
				}
			}
		})
	}
}
