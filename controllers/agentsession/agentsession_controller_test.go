package agentsession

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/runner"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// These tests run the real reconciler, runner, loop, scripted provider and
// NATS journal against envtest. envtest has no kubelet, so the tests play its
// part for the pod status (markPodReady) and the runner executes tools in a
// LocalExecutionEnvironment in a temporary directory (see envFactory).

const waitFor = 30 * time.Second

// script answers: write hello.py, then "Done.", then (for a follow-up) "Follow-up done.".
const script = `turns:
  - text: "Creating the file."
    toolCalls:
      - name: write_file
        arguments: {file_path: hello.py, content: "print('Hello World')\n"}
  - text: "Done."
  - expect: {lastUserContains: "add a comment"}
    text: "Follow-up done."
`

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testenv.Eventually(t, what, waitFor, cond)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("ns")}}
	if err := testClient.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// scriptedSession creates a session of the demo script in ns, changed by
// each of change first.
func scriptedSession(t *testing.T, ns string, change ...func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "script", Namespace: ns},
		Data:       map[string]string{"script.yaml": script},
	}
	if err := testClient.Create(t.Context(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("hello"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Write hello.py",
			Model: agentsv1.ModelSpec{
				Provider:           agentsv1.ProviderScripted,
				Name:               "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "script"},
			},
		},
	}
	for _, f := range change {
		f(s)
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s
}

func getPod(t *testing.T, s *agentsv1.AgentSession) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	eventually(t, "workspace pod created", func() error {
		return testClient.Get(t.Context(), types.NamespacedName{Namespace: s.Namespace, Name: s.Name + "-ws"}, pod)
	})
	return pod
}

// markPodReady writes the status a kubelet would write for a running pod.
func markPodReady(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := setPodReady(t, pod); err != nil {
		t.Fatalf("mark pod ready: %v", err)
	}
}

// setPodReady marks pod Running and Ready, as the kubelet would.
func setPodReady(t *testing.T, pod *corev1.Pod) error {
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	return testClient.Status().Update(t.Context(), pod)
}

// succeededSession runs a scripted session in a new namespace to Succeeded
// with its workspace pod marked Ready, and returns both.
func succeededSession(t *testing.T) (*agentsv1.AgentSession, *corev1.Pod) {
	t.Helper()
	s := scriptedSession(t, newNamespace(t))
	pod := getPod(t, s)
	markPodReady(t, pod)
	waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	return s, pod
}

func waitPhase(t *testing.T, s *agentsv1.AgentSession, want agentsv1.Phase, check func(*agentsv1.AgentSession) error) *agentsv1.AgentSession {
	t.Helper()
	got := &agentsv1.AgentSession{}
	eventually(t, fmt.Sprintf("session phase %s", want), func() error {
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), got); err != nil {
			return err
		}
		if got.Status.Phase != want {
			return fmt.Errorf("phase %q (error %q)", got.Status.Phase, got.Status.Error)
		}
		if check != nil {
			return check(got)
		}
		return nil
	})
	return got
}

func TestWorkspacePodIsOwnedLabelledAndRestricted(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	pod := getPod(t, s)
	got := waitPhase(t, s, agentsv1.PhaseProvisioning, nil)

	if !metav1.IsControlledBy(pod, got) {
		t.Errorf("pod is not controlled by the session: %+v", pod.OwnerReferences)
	}
	if pod.Labels[agentsv1.LabelSession] != s.Name || pod.Labels[agentsv1.LabelSessionUID] != string(got.UID) {
		t.Errorf("pod labels = %v", pod.Labels)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("service account token is mounted")
	}
	c := pod.Spec.Containers[0]
	if want := []string{"/agent/bin/executor-sidecar", "idle"}; !slices.Equal(c.Command, want) {
		t.Errorf("command = %v, want %v", c.Command, want)
	}
	if c.Image != "agent-operator/workspace:dev" {
		t.Errorf("image = %q", c.Image)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context is not restricted: %+v", sc)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("no default limits: %+v", c.Resources)
	}
	ic := pod.Spec.InitContainers[0]
	if want := []string{"/executor-sidecar", "copy-to", "/agent/bin"}; !slices.Equal(ic.Command, want) || ic.Image != "agent-operator/executor:dev" {
		t.Errorf("init container = %v %v", ic.Image, ic.Command)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("WorkspaceReady = %+v, want False while the pod is pending", cond)
	}
}

func TestScriptedSessionSucceedsAndDeliversMessagesOnce(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	markPodReady(t, getPod(t, s))

	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if got.Status.Turns != 2 || got.Status.ToolCalls != 1 || got.Status.Result != "Done." {
		t.Errorf("status turns=%d toolCalls=%d result=%q, want 2, 1, Done.", got.Status.Turns, got.Status.ToolCalls, got.Status.Result)
	}
	if got.Status.StartTime == nil || got.Status.CompletionTime == nil || got.Status.LastEventSequence == 0 {
		t.Errorf("times or sequence not set: %+v", got.Status)
	}
	if !strings.HasPrefix(got.Status.EventsSubject, "agents."+ns+".") {
		t.Errorf("eventsSubject = %q", got.Status.EventsSubject)
	}
	dir, _ := workspaces.dir(got)
	if data, err := os.ReadFile(filepath.Join(dir, "hello.py")); err != nil || string(data) != "print('Hello World')\n" {
		t.Errorf("hello.py = %q, %v", data, err)
	}
	eventually(t, "Kubernetes Events for the transitions", func() error {
		var list eventsv1.EventList
		if err := testClient.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.UID == got.UID {
				seen[e.Reason] = true
			}
		}
		for _, r := range []string{agentsv1.ReasonPodCreated, string(agentsv1.PhaseSucceeded)} {
			if !seen[r] {
				return fmt.Errorf("no %s event among %v", r, seen)
			}
		}
		return nil
	})

	// A follow-up after completion is delivered once and runs the next turn.
	if err := updateLatest(t, got, func(g *agentsv1.AgentSession) {
		g.Spec.Messages = append(g.Spec.Messages, agentsv1.Message{Name: "m1", Kind: agentsv1.MessageFollowUp, Text: "Now add a comment"})
	}); err != nil {
		t.Fatalf("append message: %v", err)
	}
	got = waitPhase(t, got, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if g.Status.Result != "Follow-up done." {
			return fmt.Errorf("result %q", g.Status.Result)
		}
		return nil
	})
	if !slices.Equal(got.Status.MessagesDelivered, []string{"m1"}) || got.Status.Turns != 3 {
		t.Errorf("messagesDelivered=%v turns=%d, want [m1] and 3", got.Status.MessagesDelivered, got.Status.Turns)
	}

	// More reconciles (an unrelated spec change) must not deliver it again.
	if err := updateLatest(t, got, func(g *agentsv1.AgentSession) { g.Labels = map[string]string{"poke": "1"} }); err != nil {
		t.Fatalf("poke: %v", err)
	}
	if inputs := journalInputs(t, events.SessionRef{Namespace: ns, Name: s.Name, UID: string(got.UID)}, "Now add a comment"); inputs != 1 {
		t.Errorf("the follow-up reached the journal %d times, want 1", inputs)
	}
}

func TestDeletingASessionStopsItAndDeletesThePod(t *testing.T) {
	s, pod := succeededSession(t)

	if err := testClient.Delete(t.Context(), s); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// envtest runs no garbage collector: the pod disappears only because the
	// finalizer deletes it.
	eventually(t, "pod deleted", func() error {
		err := testClient.Get(t.Context(), client.ObjectKeyFromObject(pod), &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod still exists (err %v)", err)
	})
	eventually(t, "session deleted", func() error {
		err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), &agentsv1.AgentSession{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("session still exists (err %v)", err)
	})
}

func TestLostEmptyDirWorkspaceFailsTheSession(t *testing.T) {
	s, pod := blockedSession(t, nil)

	if err := testClient.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
	c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady)
	if c == nil || c.Reason != agentsv1.ReasonWorkspaceLost {
		t.Errorf("WorkspaceReady = %+v, want reason WorkspaceLost", c)
	}
}

func TestOOMKilledWorkspaceFailsTheSessionSayingSo(t *testing.T) {
	s, pod := blockedSession(t, nil)

	// What the kubelet reports when the kernel kills the whole container (cgroup v2).
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: runner.WorkspaceContainer, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}
	if err := testClient.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("mark pod OOM-killed: %v", err)
	}
	got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
	limit := pod.Spec.Containers[0].Resources.Limits.Memory().String()
	if c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil || c.Reason != agentsv1.ReasonWorkspaceOOMKilled {
		t.Errorf("WorkspaceReady = %+v, want reason %s", c, agentsv1.ReasonWorkspaceOOMKilled)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted)
	if c == nil || c.Reason != agentsv1.ReasonWorkspaceOOMKilled || !strings.Contains(c.Message, "memory limit ("+limit+")") ||
		!strings.Contains(c.Message, "spec.workspace.resources.limits.memory") {
		t.Errorf("Completed = %+v, want the OOM kill and the limit to raise", c)
	}
}

func TestAbortEndsTheSessionAborted(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if err := updateLatest(t, got, func(g *agentsv1.AgentSession) { g.Spec.Abort = true }); err != nil {
		t.Fatalf("abort: %v", err)
	}
	got = waitPhase(t, got, agentsv1.PhaseAborted, nil)
	if c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted); c == nil || c.Status != metav1.ConditionTrue || c.Reason != agentsv1.ReasonAborted {
		t.Errorf("Completed = %+v, want True/Aborted", c)
	}
}

func TestTokenBudgetFailsTheSession(t *testing.T) {
	ns := newNamespace(t)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "costly", Namespace: ns},
		Data: map[string]string{"script.yaml": `turns:
  - text: "Thinking hard."
    usage: {inputTokens: 900, outputTokens: 200}
    toolCalls:
      - name: shell
        arguments: {command: "true"}
  - text: "Never reached."
`},
	}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("budget"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Do something expensive",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "costly"}},
			Limits: agentsv1.Limits{TokenBudget: 1000},
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
	c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted)
	if c == nil || c.Reason != agentsv1.ReasonTokenBudgetExceeded || got.Status.Usage.Total != 1100 {
		t.Errorf("Completed = %+v, usage %+v; want TokenBudgetExceeded at 1100 tokens", c, got.Status.Usage)
	}
	if got.Status.Result == "Never reached." {
		t.Error("the loop went on past the budget")
	}
}

func TestMissingScriptIsAConfigError(t *testing.T) {
	ns := newNamespace(t)
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("noscript"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Anything",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "does-not-exist"}},
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
	c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted)
	if c == nil || c.Reason != agentsv1.ReasonConfigError || !strings.Contains(got.Status.Error, "does-not-exist") {
		t.Errorf("Completed = %+v, error %q; want ConfigError naming the ConfigMap", c, got.Status.Error)
	}
}

// TestSuspendAndResumeFromTheJournal suspends a session while a command runs,
// then resumes it: the new runner restores the loop from NATS, the
// interrupted call is not re-run (the model is told so) and the session ends.
func TestSuspendAndResumeFromTheJournal(t *testing.T) {
	s, _ := blockedSession(t, nil)

	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) { g.Spec.Suspend = true }); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	waitSuspended(t, s)
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) { g.Spec.Suspend = false }); err != nil {
		t.Fatalf("resume: %v", err)
	}
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if got.Status.Result != "Resumed after the interruption." || got.Status.Turns != 2 {
		t.Errorf("result %q turns %d", got.Status.Result, got.Status.Turns)
	}
	dir, _ := workspaces.dir(got)
	if data, _ := os.ReadFile(filepath.Join(dir, "runs.txt")); string(data) != "started\n" {
		t.Errorf("runs.txt = %q: the interrupted command must run exactly once", data)
	}
}

// waitSuspended waits until s says Ready=False/Suspended.
func waitSuspended(t *testing.T, s *agentsv1.AgentSession) {
	t.Helper()
	eventually(t, "Ready=False/Suspended", func() error {
		g := &agentsv1.AgentSession{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), g); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionReady); c == nil || c.Reason != agentsv1.ReasonSuspended {
			return fmt.Errorf("Ready = %+v", c)
		}
		return nil
	})
}

func TestTTLDeletesAFinishedSession(t *testing.T) {
	ns := newNamespace(t)
	s := scriptedSession(t, ns)
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) { g.Spec.TTLSecondsAfterFinished = ptrInt32(1) }); err != nil {
		t.Fatalf("set ttl: %v", err)
	}
	markPodReady(t, getPod(t, s))
	eventually(t, "session deleted after its TTL", func() error {
		err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), &agentsv1.AgentSession{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
}

func ptrInt32(v int32) *int32 { return &v }

func TestLostPodOnAPVCIsRecreatedAndTheSessionResumes(t *testing.T) {
	s, pod := blockedSession(t, func(s *agentsv1.AgentSession) {
		s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{Size: ptrQuantity("1Gi")}
	})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: s.Namespace, Name: s.Name + "-workspace"}, pvc); err != nil {
		t.Fatalf("the operator's claim: %v", err)
	}

	if err := testClient.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	pod = waitReplacedPod(t, pod)
	if pod.Spec.Volumes[0].PersistentVolumeClaim == nil || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("new pod volume = %+v", pod.Spec.Volumes[0])
	}
	markPodReady(t, pod)
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
		if c := meta.FindStatusCondition(g.Status.Conditions, agentsv1.ConditionWorkspaceReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("WorkspaceReady = %+v", c)
		}
		return nil
	})
	if got.Status.Turns != 2 || got.Status.Result != "Resumed after the interruption." {
		t.Errorf("turns = %d, result %q after resuming, want 2 (nothing re-run)", got.Status.Turns, got.Status.Result)
	}
}

// waitReplacedPod waits for a pod of old's name that is not old, and returns it.
func waitReplacedPod(t *testing.T, old *corev1.Pod) *corev1.Pod {
	t.Helper()
	var fresh *corev1.Pod
	eventually(t, "a new pod", func() error {
		p := &corev1.Pod{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(old), p); err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("still the old pod")
		}
		fresh = p
		return nil
	})
	return fresh
}

// blockedScript runs one command that blocks until the test writes the file
// "release" into the workspace, then answers.
var blockedScript = blockedScriptWith("runs.txt", "Resumed after the interruption.")

// blockedScriptWith is blockedScript with its own marker file and final text.
func blockedScriptWith(marker, resumed string) string {
	return fmt.Sprintf(`turns:
  - text: "Running the long job."
    toolCalls:
      - name: shell
        arguments: {command: "echo started >> %s; while [ ! -f release ]; do sleep 0.05; done", timeout_ms: 120000}
  - expect: {lastToolResultContains: "interrupted"}
    text: %q
`, marker, resumed)
}

// blockedSession creates a session (changed by mutate) running blockedScript
// and returns it, with its Ready pod, once the command has started.
func blockedSession(t *testing.T, mutate func(*agentsv1.AgentSession)) (*agentsv1.AgentSession, *corev1.Pod) {
	t.Helper()
	ns := newNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "blocked", Namespace: ns}, Data: map[string]string{"script.yaml": blockedScript}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("blocked"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Run the long job",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "blocked"}},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	pod := getPod(t, s)
	markPodReady(t, pod)
	running := waitPhase(t, s, agentsv1.PhaseRunning, nil)
	ref := events.SessionRef{Namespace: ns, Name: s.Name, UID: string(running.UID)}
	eventually(t, "command running", func() error {
		evs, err := events.Replay(t.Context(), testJS.JetStream(), ref)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if ev.Kind == loop.EventToolCallStart {
				return nil
			}
		}
		return fmt.Errorf("no TOOL_CALL_START among %d events", len(evs))
	})
	// TOOL_CALL_START is journaled before the shell is started: a suspend
	// or a lost pod right after it may interrupt a command that never ran.
	dir, err := workspaces.dir(running)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the command started", func() error {
		if b, _ := os.ReadFile(filepath.Join(dir, "runs.txt")); string(b) != "started\n" {
			return fmt.Errorf("runs.txt = %q", b)
		}
		return nil
	})
	return running, getPod(t, s)
}

func ptrQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// TestSteeringReachesTheRunningLoopOnce appends a steer message while a
// command runs: the loop gets it after that tool round, exactly once.
func TestSteeringReachesTheRunningLoopOnce(t *testing.T) {
	ns := newNamespace(t)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "steer", Namespace: ns},
		Data: map[string]string{"script.yaml": `turns:
  - toolCalls:
      - name: shell
        arguments: {command: "while [ ! -f release ]; do sleep 0.05; done", timeout_ms: 60000}
  - expect: {lastUserContains: "use tabs"}
    text: "Switched to tabs."
`},
	}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("steer"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Format the code",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "steer"}},
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	markPodReady(t, getPod(t, s))
	running := waitPhase(t, s, agentsv1.PhaseRunning, nil)
	ref := events.SessionRef{Namespace: ns, Name: s.Name, UID: string(running.UID)}
	journaled := func(kind loop.EventKind, content string) (int, error) {
		evs, err := events.Replay(t.Context(), testJS.JetStream(), ref)
		n := 0
		for _, ev := range evs {
			if ev.Kind == kind && (content == "" || ev.Data.Content == content) {
				n++
			}
		}
		return n, err
	}
	eventually(t, "command running", func() error {
		if n, err := journaled(loop.EventToolCallStart, ""); err != nil || n == 0 {
			return fmt.Errorf("no TOOL_CALL_START yet (%v)", err)
		}
		return nil
	})
	if err := updateLatest(t, s, func(g *agentsv1.AgentSession) {
		g.Spec.Messages = append(g.Spec.Messages, agentsv1.Message{Name: "tabs", Kind: agentsv1.MessageSteer, Text: "Please use tabs"})
	}); err != nil {
		t.Fatalf("steer: %v", err)
	}
	// The command blocks until the test releases it, after the runner handed
	// the message to the running loop: no timing assumption.
	eventually(t, "steer delivered", func() error {
		g := &agentsv1.AgentSession{}
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), g); err != nil {
			return err
		}
		if !slices.Contains(g.Status.MessagesDelivered, "tabs") {
			return fmt.Errorf("delivered %v", g.Status.MessagesDelivered)
		}
		return nil
	})
	dir, _ := workspaces.dir(running)
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if got.Status.Result != "Switched to tabs." || !slices.Equal(got.Status.MessagesDelivered, []string{"tabs"}) {
		t.Errorf("result %q delivered %v", got.Status.Result, got.Status.MessagesDelivered)
	}
	if n, err := journaled(loop.EventSteeringInjected, "Please use tabs"); err != nil || n != 1 {
		t.Errorf("STEERING_INJECTED journaled %d times (%v), want 1", n, err)
	}
	if n, _ := journaled(loop.EventUserInput, "Please use tabs"); n != 0 {
		t.Errorf("the steer message also became an input %d times", n)
	}
}

// TestPhaseEventsLeaveOutTheFirstPending: a session's phase changes are
// Kubernetes Events on the real API server (Provisioning, Running, the end), but not the
// Pending every session starts in (one write per session that said only that
// the object exists).
func TestPhaseEventsLeaveOutTheFirstPending(t *testing.T) {
	s, _ := succeededSession(t)
	var reasons []string
	eventually(t, "the Succeeded event", func() error {
		var list eventsv1.EventList
		if err := testClient.List(t.Context(), &list, client.InNamespace(s.Namespace)); err != nil {
			return err
		}
		reasons = reasons[:0]
		for _, e := range list.Items {
			if e.Regarding.UID == s.UID && e.Action == "Transition" {
				reasons = append(reasons, e.Reason)
			}
		}
		if !slices.Contains(reasons, string(agentsv1.PhaseSucceeded)) {
			return fmt.Errorf("transition events %v, no Succeeded yet", reasons)
		}
		return nil
	})
	// The events are sent in order: once the end's is there, so would be the first one's.
	if slices.Contains(reasons, string(agentsv1.PhasePending)) || !slices.Contains(reasons, string(agentsv1.PhaseRunning)) {
		t.Errorf("transition events %v, want Running and Succeeded and no Pending", reasons)
	}
}

// journalInputs counts the USER_INPUT events with content text in the
// journal of the session ref.
func journalInputs(t *testing.T, ref events.SessionRef, text string) int {
	t.Helper()
	evs, err := events.Replay(t.Context(), testJS.JetStream(), ref)
	if err != nil {
		t.Fatalf("replay journal: %v", err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Kind == loop.EventUserInput && ev.Data.Content == text {
			n++
		}
	}
	return n
}
