package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestSucceededInputRecordsTheChange: an input that ends Succeeded records
// the workspace's change before the runner ends: progress has it, the patch
// is stored, and the journal holds CHANGES_RECORDED (a summary, no
// contents) after the input's SESSION_END. The baseline was taken before
// the agent's first tool ran: the file it wrote is part of the change, the
// file that was there at start is not.
func TestSucceededInputRecordsTheChange(t *testing.T) {
	ctx := t.Context()
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	dir := workspaceWith(t, "before.txt", "there at start\n")
	script := &scripted.Script{Turns: []scripted.Turn{
		{Text: "Writing.", ToolCalls: []scripted.ToolCall{{Name: "write_file",
			Arguments: []byte(`{"file_path": "made.txt", "content": "secret-free content\n"}`)}}},
		{Text: "done"},
	}}
	p := runToEnd(t, changesRunner(t, pub, dir, script), "writer", "write a file")
	if p.Phase != agentsv1.PhaseSucceeded || p.Changes == nil || p.Changes.Changes == nil {
		t.Fatalf("progress %s, changes %+v: want Succeeded with a recorded change", p.Phase, p.Changes)
	}
	c := p.Changes.Changes
	if p.Changes.RecordReason != agentsv1.ReasonChangesRecorded || c.FilesChanged != 1 || c.Files[0].Path != "made.txt" || c.Files[0].Status != "A" {
		t.Fatalf("recorded %s (%s): %+v; want made.txt added only", p.Changes.RecordReason, p.Changes.RecordMessage, c)
	}
	ref := events.SessionRef{Namespace: "team-a", Name: "writer", UID: "uid-writer"}
	patch, err := events.ReadChanges(ctx, pub.JetStream(), ref, changes.PatchObject)
	if err != nil || int64(len(patch)) != c.PatchBytes {
		t.Fatalf("stored patch %d bytes (%v), status says %d", len(patch), err, c.PatchBytes)
	}
	var evs []loop.Event
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err = events.Replay(ctx, pub.JetStream(), ref)
		return err == nil && len(evs) > 0 && evs[len(evs)-1].Kind == loop.EventChangesRecorded, nil
	})
	if err != nil {
		t.Fatalf("journal does not end with CHANGES_RECORDED: %v", kinds(evs))
	}
	last := evs[len(evs)-1]
	if prev := evs[len(evs)-2]; prev.Kind != loop.EventSessionEnd {
		t.Fatalf("CHANGES_RECORDED follows %s, want the input's SESSION_END", prev.Kind)
	}
	var d map[string]any
	if err := json.Unmarshal(last.Data.Changes, &d); err != nil || d["filesChanged"] != float64(1) || d["head"] != c.Head {
		t.Fatalf("event summary %s (%v)", last.Data.Changes, err)
	}
	if _, hasFiles := d["files"]; hasFiles {
		t.Fatal("the event carries the file list; it must be a summary")
	}
}

func kinds(evs []loop.Event) []loop.EventKind {
	out := make([]loop.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// An input that ends without a tool call can end while the baseline, which
// runs beside the first model call, is still being recorded: the change is
// recorded after it, so the file that was there at start is not part of
// the change.
func TestInputWithoutToolsIsRecordedAfterTheBaseline(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	dir := workspaceWith(t, "before.txt", "there at start\n")
	script := &scripted.Script{Turns: []scripted.Turn{{Text: "Nothing to do."}}}
	p := runToEnd(t, changesRunner(t, pub, dir, script), "talker", "say something")
	if p.Phase != agentsv1.PhaseSucceeded || p.Changes == nil || p.Changes.RecordReason != agentsv1.ReasonChangesRecorded {
		t.Fatalf("progress %s, changes %+v: want Succeeded with a recorded change", p.Phase, p.Changes)
	}
	if c := p.Changes.Changes; c == nil || c.FilesChanged != 0 {
		t.Fatalf("recorded %+v; want no file changed (before.txt is the baseline)", c)
	}
}

// changesRunner is a runner recording changes into pub, over a local
// environment at dir, whose model plays script.
func changesRunner(t *testing.T, pub *events.Publisher, dir string, script *scripted.Script) *Runner {
	t.Helper()
	return scriptedRunner(t, pub, script, func() (tool.ExecutionEnvironment, error) { return localenv.New(dir) },
		func(o *Options) { o.Changes = &changes.Recorder{Store: pub.ChangesStore()} })
}

// scriptedRunner is a runner whose sessions speak to script (model "demo") and run their tools
// in the environment env makes for each; mutate, if not nil, changes its options first. It is
// shut down at the test's end.
func scriptedRunner(t *testing.T, pub *events.Publisher, script *scripted.Script, env func() (tool.ExecutionEnvironment, error), mutate func(*Options)) *Runner {
	t.Helper()
	opts := Options{
		Reader:   noObjects{},
		Journals: pub,
		Clients:  func(context.Context, ClientConfig) (loop.Client, error) { return scripted.New(script, "demo"), nil },
		Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
			return env()
		},
		NotifyInterval: 10 * time.Millisecond,
		Log:            logr.Discard(),
	}
	if mutate != nil {
		mutate(&opts)
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtCleanup(t, r)
	return r
}

// workspaceWith is a new directory holding one file.
func workspaceWith(t *testing.T, name, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runToEnd runs the scripted session team-a/name (uid "uid-<name>") with
// prompt on r until its runner ends, and returns its progress.
func runToEnd(t *testing.T, r *Runner, name, prompt string) Progress {
	t.Helper()
	obj := demoSession(name, prompt)
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(t.Context(), obj.UID); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Progress(obj.UID)
	return p
}

// demoSession is session team-a/name (uid "uid-<name>") with prompt, for the scripted model
// "demo".
func demoSession(name, prompt string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: prompt,
			Model:  agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo"},
		},
	}
}
