package agentsession

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// TestComputeStatusMirrorsChanges: the runner's recording becomes
// status.changes and the ChangesRecorded/ChangesPushed conditions; a runner
// without a recording (a new one, after a restart) leaves them as they are.
func TestComputeStatusMirrorsChanges(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	recorded := &agentsv1.Changes{Base: "b", Head: "h", Branch: "agent/s", FilesChanged: 2,
		Files: []agentsv1.FileChange{{Path: "a", Status: "M"}}, RecordedTime: &now}
	earlier := &agentsv1.Changes{Base: "b", Head: "old"}
	cases := []struct {
		name       string
		prior      *agentsv1.Changes
		res        *changes.Result
		wantHead   string
		wantRec    string
		wantPushed string // reason; "" means no condition
		wantStatus metav1.ConditionStatus
	}{
		{"pushed", nil, &changes.Result{Changes: recorded, RecordReason: agentsv1.ReasonChangesRecorded,
			PushReason: agentsv1.ReasonPushed, PushMessage: "pushed"}, "h", agentsv1.ReasonChangesRecorded, agentsv1.ReasonPushed, metav1.ConditionTrue},
		{"push failed", nil, &changes.Result{Changes: recorded, RecordReason: agentsv1.ReasonChangesRecorded,
			PushReason: agentsv1.ReasonPushFailed, PushMessage: "401"}, "h", agentsv1.ReasonChangesRecorded, agentsv1.ReasonPushFailed, metav1.ConditionFalse},
		{"no push configured", nil, &changes.Result{Changes: recorded, RecordReason: agentsv1.ReasonChangesRecorded}, "h", agentsv1.ReasonChangesRecorded, "", ""},
		{"record failed keeps the earlier change", earlier, &changes.Result{RecordReason: agentsv1.ReasonRecordFailed, RecordMessage: "no git"}, "old", agentsv1.ReasonRecordFailed, "", ""},
		{"no recording by this runner", earlier, nil, "old", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{Status: agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseSucceeded, Changes: tc.prior}}
			st := computeStatus(s, observation{pod: readyPod(), progress: &runner.Progress{Restored: true, JournalAvailable: true,
				Phase: agentsv1.PhaseSucceeded, Changes: tc.res}}, now)
			if st.Changes == nil || st.Changes.Head != tc.wantHead {
				t.Fatalf("status.changes = %+v, want head %q", st.Changes, tc.wantHead)
			}
			rec := meta.FindStatusCondition(st.Conditions, agentsv1.ConditionChangesRecorded)
			switch {
			case tc.wantRec == "" && rec != nil:
				t.Fatalf("ChangesRecorded set: %+v", rec)
			case tc.wantRec != "" && (rec == nil || rec.Reason != tc.wantRec):
				t.Fatalf("ChangesRecorded = %+v, want %s", rec, tc.wantRec)
			case tc.wantRec == agentsv1.ReasonRecordFailed && rec.Status != metav1.ConditionFalse:
				t.Fatalf("RecordFailed is %s", rec.Status)
			}
			push := meta.FindStatusCondition(st.Conditions, agentsv1.ConditionChangesPushed)
			switch {
			case tc.wantPushed == "" && push != nil:
				t.Fatalf("ChangesPushed set: %+v", push)
			case tc.wantPushed != "" && (push == nil || push.Reason != tc.wantPushed || push.Status != tc.wantStatus):
				t.Fatalf("ChangesPushed = %+v, want %s/%s", push, tc.wantStatus, tc.wantPushed)
			}
			if tc.res != nil && tc.res.Changes != nil && &st.Changes.Files[0] == &tc.res.Changes.Files[0] {
				t.Fatal("status shares the runner's file list")
			}
		})
	}
}
