package agentsession

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// followUp appends a follow-up message to s and waits for it to succeed
// with the default script's third turn.
func followUp(t *testing.T, s *agentsv1.AgentSession, name string) *agentsv1.AgentSession {
	t.Helper()
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) {
		g.Spec.Messages = append(g.Spec.Messages, agentsv1.Message{Name: name, Kind: agentsv1.MessageFollowUp, Text: "Now add a comment"})
	}); err != nil {
		t.Fatalf("append message: %v", err)
	}
	return waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Follow-up done." {
			return fmt.Errorf("result %q", g.Status.Result)
		}
		return nil
	})
}

// waitRunnerGone waits until the manager holds no runner for s: an idle
// session keeps no goroutine, stream or history.
func waitRunnerGone(t *testing.T, s *agentsv1.AgentSession) {
	t.Helper()
	eventually(t, "the runner forgotten", func() error {
		if _, ok := testRunner.Progress(s.UID); ok {
			return fmt.Errorf("a runner is still held for %s", s.Name)
		}
		return nil
	})
}

// spec.limits.deadline bounds working time: a session that succeeded well
// within it stays Succeeded after the deadline's wall-clock time has passed,
// and a message then still runs.
func TestDeadlineBoundsWorkingTimeNotIdleTime(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) {
		g.Spec.Limits.Deadline = &metav1.Duration{Duration: 3 * time.Second}
	}); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	waitRunnerGone(t, got)

	time.Sleep(5 * time.Second) // the condition under test: wall-clock time past the deadline
	got = waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted); c == nil || c.Reason != agentsv1.ReasonSucceeded {
		t.Fatalf("Completed = %+v after the deadline's wall-clock time, want Succeeded", c)
	}
	if w := got.Status.WorkingTime; w == nil || w.Duration >= 3*time.Second {
		t.Errorf("workingTime = %v, want set and under the 3s deadline", w)
	}
	if got.Status.IdleSince == nil {
		t.Error("idleSince not set on a Succeeded session")
	}
	got = followUp(t, got, "m1")
	if got.Status.Turns != 3 {
		t.Errorf("turns = %d after the follow-up, want 3", got.Status.Turns)
	}
}

// The deadline still stops an input that works too long.
func TestDeadlineFailsAnInputThatWorksTooLong(t *testing.T) {
	s, _ := blockedSession(t, func(s *agentsv1.AgentSession) {
		s.Spec.Limits.Deadline = &metav1.Duration{Duration: 2 * time.Second}
	})
	got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
	if c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted); c == nil ||
		c.Reason != agentsv1.ReasonDeadlineExceeded || !strings.Contains(c.Message, "working time") {
		t.Errorf("Completed = %+v, want DeadlineExceeded naming working time", c)
	}
}

// An idle session's pod is deleted once spec.workspace.retainAfterSuccess
// has passed; status says so first, the phase stays Succeeded, and a
// message starts a new pod and runs.
func TestIdlePodIsReleasedAndAMessageStartsANewOne(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) {
		g.Spec.Workspace.RetainAfterSuccess = &metav1.Duration{}
	}); err != nil {
		t.Fatalf("set retainAfterSuccess: %v", err)
	}
	pod := getPod(t, s)
	markPodReady(t, pod)
	waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	eventually(t, "the pod released", func() error {
		err := testClient.Get(t.Context(), client.ObjectKeyFromObject(pod), &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod still there (err %v)", err)
	})
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionWorkspaceReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != agentsv1.ReasonWorkspaceReleased ||
			!strings.Contains(c.Message, "empty workspace") {
			return fmt.Errorf("WorkspaceReady = %+v", c)
		}
		return nil
	})
	waitRunnerGone(t, got)

	if err := updateLatest(t, got, func(g *agentsv1.AgentSession) {
		g.Spec.Messages = append(g.Spec.Messages, agentsv1.Message{Name: "m1", Kind: agentsv1.MessageFollowUp, Text: "Now add a comment"})
	}); err != nil {
		t.Fatalf("append message: %v", err)
	}
	markPodReady(t, waitReplacedPod(t, pod))
	waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Follow-up done." || g.Status.Turns != 3 {
			return fmt.Errorf("result %q turns %d", g.Status.Result, g.Status.Turns)
		}
		return nil
	})
}

// A finished session never fails later: its pod disappearing (a node
// drained, someone deleting it) leaves it Succeeded, saying where a message
// would run.
func TestIdleSessionStaysSucceededWhenItsPodIsLost(t *testing.T) {
	s, pod := succeededSession(t)
	if err := testClient.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil || c.Reason != agentsv1.ReasonWorkspaceReleased {
			return fmt.Errorf("WorkspaceReady = %+v", c)
		}
		return nil
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted); c == nil || c.Reason != agentsv1.ReasonSucceeded {
		t.Errorf("Completed = %+v, want Succeeded", c)
	}
}

// Suspending and resuming a Succeeded session leaves nothing behind that
// would swallow the next message.
func TestSuspendAndResumeOfASucceededSessionThenAMessageRuns(t *testing.T) {
	s, _ := succeededSession(t)
	waitRunnerGone(t, s)
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) { g.Spec.Suspend = true }); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	waitSuspended(t, s)
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) { g.Spec.Suspend = false }); err != nil {
		t.Fatalf("resume: %v", err)
	}
	got := followUp(t, s, "after-resume")
	if got.Status.Turns != 3 {
		t.Errorf("turns = %d, want 3", got.Status.Turns)
	}
}
