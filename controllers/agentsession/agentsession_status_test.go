package agentsession

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/runner"
)

func readyPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "s-ws"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
}

func pendingPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s-ws"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

func TestComputeStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	running := agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseRunning, StartTime: &now}
	cases := []struct {
		name          string
		status        agentsv1.AgentSessionStatus
		abort         bool
		obs           observation
		wantPhase     agentsv1.Phase
		wantReady     metav1.ConditionStatus
		wantWorkspace string
		wantCompleted metav1.ConditionStatus
		wantReason    string
	}{
		{"nothing yet", agentsv1.AgentSessionStatus{}, false, observation{},
			agentsv1.PhasePending, metav1.ConditionFalse, agentsv1.ReasonPending, metav1.ConditionFalse, agentsv1.ReasonPending},
		{"pod pending", agentsv1.AgentSessionStatus{}, false, observation{pod: pendingPod()},
			agentsv1.PhaseProvisioning, metav1.ConditionFalse, agentsv1.ReasonPodNotReady, metav1.ConditionFalse, agentsv1.ReasonPodCreated},
		{"pod ready, runner starting", agentsv1.AgentSessionStatus{}, false, observation{pod: readyPod()},
			agentsv1.PhaseRunning, metav1.ConditionTrue, agentsv1.ReasonPodReady, metav1.ConditionFalse, agentsv1.ReasonRunning},
		{"runner succeeded", running, false, observation{pod: readyPod(), progress: &runner.Progress{
			Phase: agentsv1.PhaseSucceeded, Reason: agentsv1.ReasonSucceeded, JournalAvailable: true}},
			agentsv1.PhaseSucceeded, metav1.ConditionTrue, agentsv1.ReasonPodReady, metav1.ConditionTrue, agentsv1.ReasonSucceeded},
		{"token budget", running, false, observation{pod: readyPod(), progress: &runner.Progress{
			Phase: agentsv1.PhaseFailed, Reason: agentsv1.ReasonTokenBudgetExceeded, Error: "token budget of 10 exceeded"}},
			agentsv1.PhaseFailed, metav1.ConditionFalse, agentsv1.ReasonPodReady, metav1.ConditionTrue, agentsv1.ReasonTokenBudgetExceeded},
		{"emptyDir pod lost wins over the runner's abort", running, false, observation{lost: agentsv1.ReasonWorkspaceLost, progress: &runner.Progress{
			Phase: agentsv1.PhaseAborted, Reason: agentsv1.ReasonAborted}},
			agentsv1.PhaseFailed, metav1.ConditionFalse, agentsv1.ReasonWorkspaceLost, metav1.ConditionTrue, agentsv1.ReasonWorkspaceLost},
		{"an init container failed", running, false, observation{lost: agentsv1.ReasonWorkspaceInitFailed, initFailure: "init container git-clone exited with code 128"},
			agentsv1.PhaseFailed, metav1.ConditionFalse, agentsv1.ReasonWorkspaceInitFailed, metav1.ConditionTrue, agentsv1.ReasonWorkspaceInitFailed},
		{"the runtime could not start the pod: counted, replaced", agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseProvisioning}, false,
			observation{pod: pendingPod(), startRetry: "the container runtime could not start container install-executor (StartError)", countStartRetry: true},
			agentsv1.PhaseProvisioning, metav1.ConditionFalse, agentsv1.ReasonWorkspaceStartRetried, metav1.ConditionFalse, agentsv1.ReasonWorkspaceStartRetried},
		{"the runtime could not start a pod on a claim after the loop started", running, false,
			observation{startRetry: "the container runtime could not start container git-clone (StartError)"},
			agentsv1.PhaseProvisioning, metav1.ConditionFalse, agentsv1.ReasonWorkspaceStartRetried, metav1.ConditionFalse, agentsv1.ReasonWorkspaceStartRetried},
		{"workspace container OOM-killed", running, false, observation{lost: agentsv1.ReasonWorkspaceOOMKilled, memoryLimit: "256Mi"},
			agentsv1.PhaseFailed, metav1.ConditionFalse, agentsv1.ReasonWorkspaceOOMKilled, metav1.ConditionTrue, agentsv1.ReasonWorkspaceOOMKilled},
		{"failed by OOM kill keeps saying so", agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseFailed, Conditions: []metav1.Condition{
			{Type: agentsv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonWorkspaceOOMKilled},
			{Type: agentsv1.ConditionWorkspaceReady, Status: metav1.ConditionFalse, Reason: agentsv1.ReasonWorkspaceOOMKilled}}},
			false, observation{released: true},
			agentsv1.PhaseFailed, metav1.ConditionFalse, agentsv1.ReasonWorkspaceOOMKilled, metav1.ConditionTrue, agentsv1.ReasonWorkspaceOOMKilled},
		{"abort waits for the runner", running, true, observation{pod: readyPod(), progress: &runner.Progress{Phase: agentsv1.PhaseRunning}},
			agentsv1.PhaseRunning, metav1.ConditionTrue, agentsv1.ReasonPodReady, metav1.ConditionFalse, agentsv1.ReasonRunning},
		{"abort done", running, true, observation{pod: readyPod(), progress: &runner.Progress{Phase: agentsv1.PhaseRunning, Done: true}},
			agentsv1.PhaseAborted, metav1.ConditionFalse, agentsv1.ReasonPodReady, metav1.ConditionTrue, agentsv1.ReasonAborted},
		{"idle session whose pod was released stays Succeeded", agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseSucceeded},
			false, observation{idle: true, released: true},
			agentsv1.PhaseSucceeded, metav1.ConditionTrue, agentsv1.ReasonWorkspaceReleased, metav1.ConditionTrue, agentsv1.ReasonSucceeded},
		{"idle session whose pod is not ready stays Succeeded", agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseSucceeded},
			false, observation{idle: true, pod: &corev1.Pod{}},
			agentsv1.PhaseSucceeded, metav1.ConditionTrue, agentsv1.ReasonPodNotReady, metav1.ConditionTrue, agentsv1.ReasonSucceeded},
		{"idle session waiting for an answer keeps AwaitingInput", agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseAwaitingInput},
			false, observation{idle: true, releasing: true, pod: readyPod()},
			agentsv1.PhaseAwaitingInput, metav1.ConditionTrue, agentsv1.ReasonWorkspaceReleased, metav1.ConditionFalse, agentsv1.ReasonAwaitingInput},
		{"suspended", running, false, observation{pod: readyPod(), suspended: true},
			agentsv1.PhaseRunning, metav1.ConditionFalse, agentsv1.ReasonPodReady, metav1.ConditionFalse, agentsv1.ReasonSuspended},
		{"failed stays failed", agentsv1.AgentSessionStatus{Phase: agentsv1.PhaseFailed, Conditions: []metav1.Condition{
			{Type: agentsv1.ConditionCompleted, Status: metav1.ConditionTrue, Reason: agentsv1.ReasonTurnLimit}}},
			false, observation{pod: readyPod(), progress: &runner.Progress{Phase: agentsv1.PhaseSucceeded}},
			agentsv1.PhaseFailed, metav1.ConditionFalse, agentsv1.ReasonPodReady, metav1.ConditionTrue, agentsv1.ReasonTurnLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 3}}
			s.Spec.Abort = tc.abort
			s.Status = tc.status
			st := computeStatus(s, tc.obs, now)
			if st.Phase != tc.wantPhase {
				t.Fatalf("phase = %s, want %s", st.Phase, tc.wantPhase)
			}
			check := func(typ string, want metav1.ConditionStatus, reason string) {
				t.Helper()
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil || c.Status != want || (reason != "" && c.Reason != reason) || c.ObservedGeneration != 3 {
					t.Errorf("%s = %+v, want %s/%s at generation 3", typ, c, want, reason)
				}
			}
			check(agentsv1.ConditionReady, tc.wantReady, "")
			check(agentsv1.ConditionWorkspaceReady, condStatus(tc.wantWorkspace == agentsv1.ReasonPodReady), tc.wantWorkspace)
			check(agentsv1.ConditionCompleted, tc.wantCompleted, tc.wantReason)
			if final := st.Phase.IsFinal(); final != (st.CompletionTime != nil) {
				t.Errorf("completionTime = %v for phase %s", st.CompletionTime, st.Phase)
			}
		})
	}
}

func TestOOMKilled(t *testing.T) {
	limited := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	pod := func(name, reason string, res corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Resources: res}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: name, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: reason}}}}},
		}
	}
	cases := []struct {
		name      string
		pod       *corev1.Pod
		wantLimit string
		want      bool
	}{
		{"no pod", nil, "", false},
		{"running", readyPod(), "", false},
		{"OOM-killed with a limit", pod(runner.WorkspaceContainer, "OOMKilled", limited), "256Mi", true},
		{"OOM-killed without a limit", pod(runner.WorkspaceContainer, "OOMKilled", corev1.ResourceRequirements{}), "unset", true},
		{"killed otherwise", pod(runner.WorkspaceContainer, "Error", limited), "", false},
		{"another container", pod("sidecar", "OOMKilled", limited), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			limit, ok := oomKilled(tc.pod)
			if ok != tc.want || limit != tc.wantLimit {
				t.Errorf("oomKilled = %q, %v; want %q, %v", limit, ok, tc.wantLimit, tc.want)
			}
		})
	}
}

// A failed init container (a clone with wrong credentials) is named in
// status with its exit code and the end of its log, credentials in URLs
// masked.
func TestInitFailure(t *testing.T) {
	pod := func(statuses ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: statuses}}
	}
	exited := func(name string, code int32, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
		ok   bool
	}{
		{"no pod", nil, "", false},
		{"init containers succeeded", pod(exited("install-executor", 0, ""), exited("git-clone", 0, "")), "", false},
		{"clone failed", pod(exited("install-executor", 0, ""), exited("git-clone", 128,
			"Cloning into '/workspace'...\nfatal: Authentication failed for 'http://e2e:s3cret@10.96.0.7:8080/demo.git/'\n")),
			"init container git-clone exited with code 128: Cloning into '/workspace'...\nfatal: Authentication failed for 'http://***@10.96.0.7:8080/demo.git/'", true},
		{"no message", pod(exited("install-executor", 1, "")), "init container install-executor exited with code 1", true},
		{"escape sequences and control bytes from the image", pod(exited("git-clone", 1,
			"\x1b]0;owned\x07\x1b[2J\x1b[31mred\r\x00\u009b6n\xff\tok\nnext line")),
			"init container git-clone exited with code 1: ?]0;owned??[2J?[31mred???6n?\tok\nnext line", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := initFailure(tc.pod)
			if got != tc.want || ok != tc.ok {
				t.Errorf("initFailure = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func condStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// A restored runner's view of what was delivered replaces status's: status
// may have recorded a message the journal never got (the manager stopped in
// between), and that message must be given again.
func TestMirrorProgressTakesDeliveriesFromTheJournal(t *testing.T) {
	st := agentsv1.AgentSessionStatus{MessagesDelivered: []string{"a", "b"}}
	mirrorProgress(&st, &runner.Progress{Delivered: []string{"a"}})
	if !slices.Equal(st.MessagesDelivered, []string{"a", "b"}) {
		t.Errorf("before the journal was read: delivered %v, want status's [a b]", st.MessagesDelivered)
	}
	mirrorProgress(&st, &runner.Progress{Delivered: []string{"a"}, Restored: true})
	if !slices.Equal(st.MessagesDelivered, []string{"a"}) {
		t.Errorf("after: delivered %v, want the journal's [a]", st.MessagesDelivered)
	}
}

func TestMirrorProgress(t *testing.T) {
	st := agentsv1.AgentSessionStatus{MessagesDelivered: []string{"a"}}
	mirrorProgress(&st, &runner.Progress{
		Turns: 4, ToolCalls: 2, LastSeq: 17, Delivered: []string{"a", "b"}, Restored: true,
		Usage:  llm.Usage{InputTokens: 100, OutputTokens: 20, ReasoningTokens: 5, CacheReadTokens: 40},
		Result: "ok", ResultTruncated: true, Cost: 1_500_000, Currency: "USD",
		MCPServers: []agentsv1.MCPServerStatus{{Name: "docs", Connected: true, Tools: 3}},
	})
	want := agentsv1.Usage{Input: 100, Output: 20, Reasoning: 5, CacheRead: 40, Total: 120}
	if st.Usage != want || st.Turns != 4 || st.ToolCalls != 2 || st.LastEventSequence != 17 ||
		st.Result != "ok" || !st.ResultTruncated || len(st.MessagesDelivered) != 2 {
		t.Errorf("status = %+v", st)
	}
	if st.Cost != "0.001500" || st.Currency != "USD" || len(st.MCPServers) != 1 || st.MCPServers[0].Tools != 3 {
		t.Errorf("cost %q %q, mcpServers %+v", st.Cost, st.Currency, st.MCPServers)
	}
}
