package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/events/render"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

// The suite runs a real kube-apiserver and etcd (envtest) with the real CRD,
// and a real embedded NATS server listening on a port, and drives the
// plugin through its cobra commands.
var kubeconfigPath string

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "kubectl-agent-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cfg, kubeconfigPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: "default"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// cli runs the plugin with args and returns stdout.
func cli(t *testing.T, natsURL string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader("text from stdin\n"))
	root.SetArgs(append([]string{"--kubeconfig", kubeconfigPath, "--nats-url", natsURL}, args...))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func kubeClient(t *testing.T) client.Client {
	t.Helper()
	g := &globals{kubeconfig: kubeconfigPath}
	c, _, err := g.kube()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRunSteerFollowUpAbortGet(t *testing.T) {
	ctx := t.Context()
	out, err := cli(t, "", "run", "--name", "cli-test", "--provider", "anthropic", "--model", "claude-sonnet-4-5",
		"--api-key-secret", "llm/api-key", "--max-turns", "7", "fix the flaky test")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if strings.TrimSpace(out) != "cli-test" {
		t.Errorf("run printed %q", out)
	}
	c := kubeClient(t)
	var s v1alpha1.AgentSession
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cli-test"}, &s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Prompt != "fix the flaky test" || s.Spec.Model.APIKeySecretRef.Name != "llm" || s.Spec.Model.APIKeySecretRef.Key != "api-key" || s.Spec.Limits.MaxTurns != 7 {
		t.Errorf("created spec %+v", s.Spec)
	}

	if _, err := cli(t, "", "steer", "cli-test", "look", "at", "main.go"); err != nil {
		t.Fatalf("steer: %v", err)
	}
	if _, err := cli(t, "", "follow-up", "cli-test", "-"); err != nil {
		t.Fatalf("follow-up: %v", err)
	}
	if _, err := cli(t, "", "steer", "cli-test", "again"); err != nil {
		t.Fatalf("steer: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cli-test"}, &s); err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.Message{
		{Name: "steer-1", Kind: v1alpha1.MessageSteer, Text: "look at main.go"},
		{Name: "follow-up-2", Kind: v1alpha1.MessageFollowUp, Text: "text from stdin\n"},
		{Name: "steer-3", Kind: v1alpha1.MessageSteer, Text: "again"},
	}
	if fmt.Sprint(s.Spec.Messages) != fmt.Sprint(want) {
		t.Errorf("messages %+v, want %+v", s.Spec.Messages, want)
	}

	out, err = cli(t, "", "get")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "cli-test") || !strings.Contains(out, "claude-sonnet-4-5") {
		t.Errorf("get printed:\n%s", out)
	}
	if _, err := cli(t, "", "abort", "cli-test"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cli-test"}, &s); err != nil {
		t.Fatal(err)
	}
	if !s.Spec.Abort {
		t.Error("spec.abort not set")
	}
	out, err = cli(t, "", "get", "cli-test")
	if err != nil || !strings.Contains(out, "default/cli-test") {
		t.Errorf("get cli-test: %v\n%s", err, out)
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"run", "x"}, "--model is required"},
		{"empty prompt", []string{"run", "--model", "m", " "}, "empty prompt"},
		{"bad secret ref", []string{"run", "--model", "m", "--api-key-secret", "nokey", "x"}, "not NAME/KEY"},
		{"steer unknown session", []string{"steer", "nope", "x"}, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cli(t, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLogsReplayAndFollow(t *testing.T) {
	ctx := t.Context()
	srv, pub := eventstest.Start(t, events.EmbeddedOptions{Port: -1}, events.PublisherOptions{})
	// A session that exists in the cluster, so logs reads its uid.
	c := kubeClient(t)
	s := &v1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "logs.test"},
		Spec:       v1alpha1.AgentSessionSpec{Prompt: "p", Model: v1alpha1.ModelSpec{Provider: v1alpha1.ProviderOpenAICompatible, Name: "m", BaseURL: "http://llm"}},
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	ref := events.SessionRef{Namespace: "default", Name: "logs.test", UID: string(s.UID)}
	j, err := pub.NewJournal(ref, 0, events.JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	evs := []loop.Event{
		{Kind: loop.EventSessionStart, Data: loop.EventData{State: "IDLE"}},
		{Kind: loop.EventUserInput, Data: loop.EventData{Content: "p"}},
		{Kind: loop.EventAssistantTextEnd, Data: loop.EventData{Text: "hello"}},
		{Kind: loop.EventSessionEnd, Data: loop.EventData{State: "CLOSED"}},
	}
	for i := range evs {
		evs[i].Seq, evs[i].Time, evs[i].SessionID = uint64(i+1), t0, ref.UID
		if err := j.Append(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	r := render.New(&want, render.Options{MaxOutputLines: 40, Timestamps: true})
	for _, ev := range evs {
		_ = r.Event(ev)
	}
	for _, args := range [][]string{{"logs", "logs.test"}, {"logs", "-f", "logs.test"}} {
		out, err := cli(t, srv.ClientURL(), args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out != want.String() {
			t.Errorf("%v printed:\n%s\nwant:\n%s", args, out, want.String())
		}
	}
	out, err := cli(t, srv.ClientURL(), "logs", "--raw", "--since-seq", "3", "logs.test")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], `"seq":3`) {
		t.Errorf("raw logs:\n%s", out)
	}
}

func TestNextMessageName(t *testing.T) {
	tests := []struct {
		msgs []v1alpha1.Message
		kind v1alpha1.MessageKind
		want string
	}{
		{nil, v1alpha1.MessageSteer, "steer-1"},
		{[]v1alpha1.Message{{Name: "a"}}, v1alpha1.MessageFollowUp, "follow-up-2"},
		{[]v1alpha1.Message{{Name: "steer-2"}}, v1alpha1.MessageSteer, "steer-3"},
	}
	for _, tt := range tests {
		if got := nextMessageName(tt.msgs, tt.kind); got != tt.want {
			t.Errorf("nextMessageName(%v, %s) = %q, want %q", tt.msgs, tt.kind, got, tt.want)
		}
	}
}

// TestLogsIndentsSubagentsUnderTheirSpawn: a replay prints a child's events
// indented right after the parent's spawn_agent call that created it, and
// --raw keeps to the session's own events.
func TestLogsIndentsSubagentsUnderTheirSpawn(t *testing.T) {
	ctx := t.Context()
	srv, pub := eventstest.Start(t, events.EmbeddedOptions{Port: -1}, events.PublisherOptions{})
	c := kubeClient(t)
	spec := v1alpha1.AgentSessionSpec{Prompt: "p", Model: v1alpha1.ModelSpec{Provider: v1alpha1.ProviderOpenAICompatible, Name: "m", BaseURL: "http://llm"}}
	parent := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tree.lead"}, Spec: spec}
	if err := c.Create(ctx, parent); err != nil {
		t.Fatal(err)
	}
	child := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tree.lead-sub-1",
		Labels: map[string]string{v1alpha1.LabelParentUID: string(parent.UID)}}, Spec: spec}
	child.Spec.Depth = ptr.To[int32](1)
	child.Spec.ParentRef = &v1alpha1.ParentReference{Name: parent.Name, UID: string(parent.UID)}
	if err := c.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	journal := func(s *v1alpha1.AgentSession, evs []loop.Event) {
		t.Helper()
		ref := events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}
		j, err := pub.NewJournal(ref, 0, events.JournalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			evs[i].Seq, evs[i].Time, evs[i].SessionID = uint64(i+1), t0, ref.UID
			if err := j.Append(ctx, evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	journal(parent, []loop.Event{
		{Kind: loop.EventUserInput, Data: loop.EventData{Content: "delegate"}},
		{Kind: loop.EventToolCallEnd, Data: loop.EventData{ToolName: "spawn_agent", CallID: "c1", Output: "Spawned agent tree.lead-sub-1."}},
		{Kind: loop.EventAssistantTextEnd, Data: loop.EventData{Text: "parent done"}},
	})
	journal(child, []loop.Event{
		{Kind: loop.EventUserInput, Data: loop.EventData{Content: "the child's task"}},
		{Kind: loop.EventAssistantTextEnd, Data: loop.EventData{Text: "child done"}},
	})

	out, err := cli(t, srv.ClientURL(), "logs", "--timestamps=false", "tree.lead")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	spawn := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "spawn_agent") })
	task := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "the child's task") })
	childDone := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "child done") })
	parentDone := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "parent done") })
	if spawn < 0 || task < spawn || childDone < task || parentDone < childDone {
		t.Fatalf("the child's events are not between the spawn and the parent's next event:\n%s", out)
	}
	for _, i := range []int{task, childDone} {
		if !strings.HasPrefix(lines[i], "  ") {
			t.Errorf("child line %q is not indented", lines[i])
		}
	}
	if strings.HasPrefix(lines[parentDone], " ") {
		t.Errorf("parent line %q is indented", lines[parentDone])
	}
	raw, err := cli(t, srv.ClientURL(), "logs", "--raw", "tree.lead")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, "child done") {
		t.Errorf("--raw printed the child's events:\n%s", raw)
	}
}
