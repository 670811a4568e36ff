package agentsession

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// startErrorMessage is what containerd reported for the pod whose session
// failed the load spec on a saturated node.
const startErrorMessage = "failed to create containerd task: failed to create shim task: OCI runtime create failed: " +
	"runc create failed: unable to create new parent process: namespace path: lstat /proc/0/ns/ipc: no such file or directory"

func startError(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: "StartError", Message: startErrorMessage}}}
}

// Only a container the runtime could not start is the runtime's fault; a
// container that ran and failed (a clone with wrong credentials, an OOM
// kill) is not.
func TestRuntimeStartFailure(t *testing.T) {
	failed := func(init, main []corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: init, ContainerStatuses: main}}
	}
	exited := func(name string, code int32, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"no pod", nil, ""},
		{"a clone that failed", failed([]corev1.ContainerStatus{exited("install-executor", 0, "Completed"), exited("git-clone", 128, "Error")}, nil), ""},
		{"OOM-killed", failed(nil, []corev1.ContainerStatus{exited(runner.WorkspaceContainer, 137, "OOMKilled")}), ""},
		{"an init container the runtime could not start", failed([]corev1.ContainerStatus{startError("install-executor")}, nil),
			"the container runtime could not start container install-executor (StartError): " + startErrorMessage},
		{"the workspace container", failed([]corev1.ContainerStatus{exited("install-executor", 0, "Completed")},
			[]corev1.ContainerStatus{exited(runner.WorkspaceContainer, 128, "ContainerCannotRun")}),
			"the container runtime could not start container workspace (ContainerCannotRun)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := runtimeStartFailure(tc.pod)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("runtimeStartFailure = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// failPodToStart writes the status the kubelet writes when containerd could
// not start the pod's first init container, and returns the pod's UID.
func failPodToStart(t *testing.T, s *agentsv1.AgentSession) types.UID {
	t.Helper()
	pod := getPod(t, s)
	pod.Status.Phase = corev1.PodFailed
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{startError(pod.Spec.InitContainers[0].Name)}
	if err := testClient.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("fail pod to start: %v", err)
	}
	return pod.UID
}

// waitReplaced waits for a pod other than old, created for the attempt
// want, and for status.workspaceStartRetries to say want.
func waitReplaced(t *testing.T, s *agentsv1.AgentSession, old types.UID, want int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("replacement pod, retry %d", want), func() error {
		pod := &corev1.Pod{}
		if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: s.Namespace, Name: podName(s)}, pod); err != nil {
			return err
		}
		got := &agentsv1.AgentSession{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
			return err
		}
		switch {
		case pod.UID == old:
			return fmt.Errorf("still the pod the runtime could not start (session phase %s)", got.Status.Phase)
		case pod.Annotations[AnnotationStartAttempt] != strconv.Itoa(int(want)):
			return fmt.Errorf("new pod's %s = %q, want %d", AnnotationStartAttempt, pod.Annotations[AnnotationStartAttempt], want)
		case got.Status.WorkspaceStartRetries != want:
			return fmt.Errorf("status.workspaceStartRetries = %d, want %d", got.Status.WorkspaceStartRetries, want)
		case got.Status.Phase == agentsv1.PhaseFailed || got.Status.Phase == agentsv1.PhaseAborted:
			return fmt.Errorf("session ended %s: %s", got.Status.Phase, got.Status.Error)
		}
		return nil
	})
}

// A pod one of whose containers the container runtime could not start
// (containerd's StartError under load) is replaced, each replacement counted
// once in status, at most MaxWorkspaceStartRetries times; the session runs
// in the pod that starts. A manager that stopped between counting and
// replacing does not count the pod again. The old code failed the session
// at the first StartError (WorkspaceInitFailed).
func TestRuntimeStartErrorReplacesThePod(t *testing.T) {
	t.Run("a new pod that starts runs the session", func(t *testing.T) {
		s := scriptedSession(t, newNamespace(t))
		old := failPodToStart(t, s)
		waitReplaced(t, s, old, 1)
		waitWarning(t, s.Namespace, s.UID, agentsv1.ReasonWorkspaceStartRetried)
		markPodReady(t, getPod(t, s))
		got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
		if got.Status.WorkspaceStartRetries != 0 || got.Status.Result != "Done." {
			t.Errorf("workspaceStartRetries = %d, result %q; want 0 (a pod started), Done.", got.Status.WorkspaceStartRetries, got.Status.Result)
		}
	})
	t.Run("bounded, then the session fails saying why", func(t *testing.T) {
		s := scriptedSession(t, newNamespace(t))
		for i := int32(1); i <= MaxWorkspaceStartRetries; i++ {
			old := failPodToStart(t, s)
			waitReplaced(t, s, old, i)
		}
		failPodToStart(t, s)
		got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
		c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady)
		if c == nil || c.Reason != agentsv1.ReasonWorkspaceInitFailed || !strings.Contains(c.Message, "StartError") ||
			!strings.Contains(c.Message, fmt.Sprintf("also after %d new pods", MaxWorkspaceStartRetries)) {
			t.Errorf("WorkspaceReady = %+v, want WorkspaceInitFailed naming the StartError and the retries", c)
		}
		if got.Status.WorkspaceStartRetries != MaxWorkspaceStartRetries {
			t.Errorf("workspaceStartRetries = %d, want %d", got.Status.WorkspaceStartRetries, MaxWorkspaceStartRetries)
		}
	})
	t.Run("a pod counted before a crash is not counted again", func(t *testing.T) {
		// The state a manager leaves that stopped after writing the count and
		// before deleting the pod: count 1, the pod created for attempt 0.
		s := scriptedSession(t, newNamespace(t))
		got := waitPhase(t, s, agentsv1.PhaseProvisioning, nil)
		got.Status.WorkspaceStartRetries = 1
		if err := testClient.Status().Update(t.Context(), got); err != nil {
			t.Fatalf("write the count: %v", err)
		}
		old := failPodToStart(t, s)
		waitReplaced(t, s, old, 1)
		// A second count would come with the first reconciles after the replacement.
		consistently(t, 2*time.Second, "the pod counted once", func() error {
			if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
				return err
			}
			if got.Status.WorkspaceStartRetries != 1 {
				return fmt.Errorf("workspaceStartRetries = %d, want 1: the pod was counted twice", got.Status.WorkspaceStartRetries)
			}
			return nil
		})
	})
}

// releasedIdleSession runs a scripted session (changed by change) to
// Succeeded with its pod released (retainAfterSuccess 0s) and returns it
// with the released pod.
func releasedIdleSession(t *testing.T, change ...func(*agentsv1.AgentSession)) (*agentsv1.AgentSession, *corev1.Pod) {
	t.Helper()
	s := scriptedSession(t, newNamespace(t), append([]func(*agentsv1.AgentSession){func(s *agentsv1.AgentSession) {
		s.Spec.Workspace.RetainAfterSuccess = &metav1.Duration{}
	}}, change...)...)
	pod := getPod(t, s)
	markPodReady(t, pod)
	waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil || c.Reason != agentsv1.ReasonWorkspaceReleased {
			return fmt.Errorf("WorkspaceReady = %+v", c)
		}
		return nil
	})
	return s, pod
}

// appendFollowUp appends the follow-up m1 of the default script to s.
func appendFollowUp(t *testing.T, s *agentsv1.AgentSession) {
	t.Helper()
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) {
		g.Spec.Messages = append(g.Spec.Messages, agentsv1.Message{Name: "m1", Kind: agentsv1.MessageFollowUp, Text: "Now add a comment"})
	}); err != nil {
		t.Fatalf("append message: %v", err)
	}
}

// idleReleased is releasedIdleSession with a follow-up appended; it returns
// the session and the pod made for the follow-up, not Ready yet.
func idleReleased(t *testing.T) (*agentsv1.AgentSession, *corev1.Pod) {
	t.Helper()
	s, first := releasedIdleSession(t)
	appendFollowUp(t, s)
	return s, waitReplacedPod(t, first)
}

// The pod made for an idle session's message is as exposed to the runtime
// as any: a StartError is retried the same way and the message then runs.
// An init container that ran and failed (a clone whose credentials were
// revoked since the first input) fails the input the message started: the
// old code deleted and recreated the pod every few seconds, forever, while
// the session said Succeeded.
func TestMessagesPodThatCannotStart(t *testing.T) {
	t.Run("the runtime could not start it: replaced, the message runs", func(t *testing.T) {
		s, pod := idleReleased(t)
		old := failPodToStart(t, s)
		waitReplaced(t, s, old, 1)
		if pod.UID != old {
			t.Fatalf("failed pod %s, want the message's %s", old, pod.UID)
		}
		markPodReady(t, getPod(t, s))
		got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
			if g.Status.Result != "Follow-up done." {
				return fmt.Errorf("result %q", g.Status.Result)
			}
			return nil
		})
		if got.Status.WorkspaceStartRetries != 0 {
			t.Errorf("workspaceStartRetries = %d, want 0 once the pod started", got.Status.WorkspaceStartRetries)
		}
	})
	t.Run("its clone failed: the session fails saying why, no new pods", func(t *testing.T) {
		s, pod := idleReleased(t)
		pod.Status.Phase = corev1.PodFailed
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.InitContainers[0].Name, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "Error",
				Message: "fatal: Authentication failed for 'https://git.example/demo.git/'"}}}}
		if err := testClient.Status().Update(t.Context(), pod); err != nil {
			t.Fatalf("fail the clone: %v", err)
		}
		got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
		c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady)
		if c == nil || c.Reason != agentsv1.ReasonWorkspaceInitFailed || !strings.Contains(c.Message, "Authentication failed") {
			t.Errorf("WorkspaceReady = %+v, want WorkspaceInitFailed with the clone's log", c)
		}
		eventually(t, "the failed pod released, none made after it", func() error {
			p := &corev1.Pod{}
			err := testClient.Get(t.Context(), client.ObjectKeyFromObject(pod), p)
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return err
			case p.UID != pod.UID:
				return fmt.Errorf("a new pod %s was made for a failed session", p.UID)
			}
			return fmt.Errorf("the failed pod is still there")
		})
	})
}
