package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// envtest runs no controller, so these tests write the status the way the
// controller does once the session ends, through the status subresource.

// created polls until the session exists and returns it.
func created(t *testing.T, c client.Client, name string) *v1alpha1.AgentSession {
	t.Helper()
	s := &v1alpha1.AgentSession{}
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, s) == nil, nil
	})
	if err != nil {
		t.Fatalf("session %s was not created: %v", name, err)
	}
	return s
}

// endSession writes a final status as the controller would.
func endSession(t *testing.T, c client.Client, s *v1alpha1.AgentSession, st v1alpha1.AgentSessionStatus) {
	t.Helper()
	s.Status = st
	if err := c.Status().Update(t.Context(), s); err != nil {
		t.Fatalf("update status: %v", err)
	}
}

func TestRunWaitExitsWithTheOutcome(t *testing.T) {
	c := kubeClient(t)
	tests := []struct {
		phase      v1alpha1.Phase
		code       int
		wantStdout string
	}{
		{v1alpha1.PhaseSucceeded, 0, "All tests pass.\n"},
		{v1alpha1.PhaseFailed, exitFailed, "All tests pass.\n"},
		{v1alpha1.PhaseAborted, exitAborted, "All tests pass.\n"},
		{v1alpha1.PhaseAwaitingInput, exitAwaitingInput, "All tests pass.\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase), func(t *testing.T) {
			name := "wait-" + strings.ToLower(string(tt.phase))
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := cli(t, "", "run", "--wait", "--name", name, "--provider", "scripted", "--model", "demo",
					"--script-configmap", "script", "run the tests")
				done <- result{out, err}
			}()
			s := created(t, c, name)
			select {
			case r := <-done:
				t.Fatalf("run --wait returned before the session ended: %q, %v", r.out, r.err)
			default:
			}
			endSession(t, c, s, v1alpha1.AgentSessionStatus{Phase: tt.phase, Result: "All tests pass.", Error: "boom", Turns: 2})
			r := <-done
			if code := exitCode(r.err, io.Discard); code != tt.code {
				t.Errorf("exit code %d (err %v), want %d", code, r.err, tt.code)
			}
			if r.out != tt.wantStdout {
				t.Errorf("stdout %q, want %q", r.out, tt.wantStdout)
			}
			if tt.phase == v1alpha1.PhaseFailed && !strings.Contains(r.err.Error(), "boom") {
				t.Errorf("the failure does not say why: %v", r.err)
			}
		})
	}
}

func TestRunWaitTimesOut(t *testing.T) {
	_, err := cli(t, "", "run", "--wait", "--timeout", "300ms", "--name", "wait-timeout", "--provider", "scripted", "--model", "demo", "--script-configmap", "script", "x")
	if code := exitCode(err, io.Discard); code != exitTimeout {
		t.Errorf("exit code %d (err %v), want %d", code, err, exitTimeout)
	}
	if err == nil || !strings.Contains(err.Error(), "still running after --timeout 300ms") {
		t.Errorf("error %v", err)
	}
}

func TestRunFollowPrintsTheEventsThenExitsWithTheOutcome(t *testing.T) {
	srv, pub := eventstest.Start(t, events.EmbeddedOptions{Port: -1}, events.PublisherOptions{})
	c := kubeClient(t)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := cli(t, srv.ClientURL(), "run", "--follow", "--name", "follow-test", "--provider", "scripted", "--model", "demo", "--script-configmap", "script", "x")
		done <- result{out, err}
	}()
	s := created(t, c, "follow-test")
	ref := events.SessionRef{Namespace: "default", Name: s.Name, UID: string(s.UID)}
	j, err := pub.NewJournal(ref, 0, events.JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs := []loop.Event{
		{Kind: loop.EventSessionStart, Data: loop.EventData{State: "IDLE"}},
		{Kind: loop.EventUserInput, Data: loop.EventData{Content: "x"}},
		{Kind: loop.EventAssistantTextEnd, Data: loop.EventData{Text: "I could not do it"}},
		{Kind: loop.EventSessionEnd, Data: loop.EventData{State: "CLOSED", Error: "the model gave up"}},
	}
	for i := range evs {
		evs[i].Seq, evs[i].Time, evs[i].SessionID = uint64(i+1), time.Now(), ref.UID
		if err := j.Append(t.Context(), evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	endSession(t, c, s, v1alpha1.AgentSessionStatus{Phase: v1alpha1.PhaseFailed, Error: "the model gave up", LastEventSequence: 4})
	r := <-done
	if code := exitCode(r.err, io.Discard); code != exitFailed {
		t.Errorf("exit code %d (err %v), want %d", code, r.err, exitFailed)
	}
	for _, want := range []string{"▶ user: x", "◆ assistant: I could not do it", "■ session ended (CLOSED): the model gave up"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
}

func TestSessionFromFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `apiVersion: agent-operator.dev/v1alpha1
kind: AgentSession
metadata: {name: from-file}
spec:
  prompt: fix it
  model: {provider: scripted, name: demo}
`)
	tests := []struct {
		name, path, override string
		wantName, wantErr    string
	}{
		{"manifest", good, "", "from-file", ""},
		{"name flag wins", good, "other", "other", ""},
		{"generated name", write("noname.yaml", "spec: {prompt: p, model: {provider: scripted, name: demo}}\n"), "", "", ""},
		{"wrong kind", write("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"), "", "", "is a v1 Pod"},
		{"unknown field", write("typo.yaml", "spec: {promt: p}\n"), "", "", "unknown field"},
		{"missing file", filepath.Join(dir, "nope.yaml"), "", "", "read manifest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sessionFromFile(tt.path, "team-a", tt.override, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tt.wantName || s.Namespace != "team-a" || (s.Name == "" && s.GenerateName != "agent-") {
				t.Errorf("session %s/%s (generateName %q)", s.Namespace, s.Name, s.GenerateName)
			}
		})
	}
}

func TestRunFromFileCreatesTheManifest(t *testing.T) {
	p := filepath.Join(t.TempDir(), "task.yaml")
	body := "apiVersion: agent-operator.dev/v1alpha1\nkind: AgentSession\nmetadata: {name: file-task}\nspec:\n  prompt: from the file\n  model: {provider: scripted, name: demo, scriptConfigMapRef: {name: script}}\n  limits: {maxTurns: 3}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, "", "run", "--filename", p, "a prompt too"); err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Errorf("prompt with --filename: %v", err)
	}
	out, err := cli(t, "", "run", "-F", p)
	if err != nil || strings.TrimSpace(out) != "file-task" {
		t.Fatalf("run -F: %q, %v", out, err)
	}
	s := created(t, kubeClient(t), "file-task")
	if s.Spec.Prompt != "from the file" || s.Spec.Limits.MaxTurns != 3 {
		t.Errorf("spec %+v", s.Spec)
	}
}

func TestManagerPod(t *testing.T) {
	ctx := t.Context()
	c := kubeClient(t)
	mkNS := func(name string) {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	mkPod := func(ns, name string, ready bool) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: managerSelectorLabels()},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "manager"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	mkNS("ops-a")
	mkNS("ops-b")
	mkNS("ops-empty")
	mkPod("ops-a", "manager-old", false)
	mkPod("ops-a", "manager-new", true)
	mkPod("ops-b", "manager", true)

	tests := []struct {
		ns, wantPod, wantErr string
	}{
		{"ops-a", "manager-new", ""},
		{"ops-b", "manager", ""},
		{"ops-empty", "", "no running, ready pod"},
		{"", "", "managers run in namespaces ops-a, ops-b"},
	}
	for _, tt := range tests {
		t.Run("ns="+tt.ns, func(t *testing.T) {
			p, err := managerPod(ctx, c, tt.ns)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || p.Name != tt.wantPod {
				t.Fatalf("pod %v, err %v; want %s", p, err, tt.wantPod)
			}
		})
	}
}

func managerSelectorLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "agent-operator", "app.kubernetes.io/component": "manager"}
}
