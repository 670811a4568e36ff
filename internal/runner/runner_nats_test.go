package runner

import (
	"context"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// noObjects is the Reader of sessions that name no Secret or ConfigMap: every
// read is an error, so a test fails if the runner unexpectedly reads one.
type noObjects struct{}

func (noObjects) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("unexpected read: the test session names no Secret or ConfigMap")
}

func (noObjects) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("unexpected list")
}

// modelCalls counts the model calls of a real scripted client.
type modelCalls struct {
	loop.Client
	calls atomic.Int32
}

func (c *modelCalls) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	c.calls.Add(1)
	return c.Client.Complete(ctx, req)
}

func (c *modelCalls) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	c.calls.Add(1)
	return c.Client.Stream(ctx, req)
}

// TestSessionPausesWhileNATSIsDownAndResumes runs a session through the
// Runner with a real embedded NATS journal, stops the server while a tool
// runs, and checks that the loop pauses at the tool's TOOL_CALL_END boundary
// (no further model call) with JournalAvailable false and the error, then
// finishes once the server is back on the same store, with a journal that
// lost nothing.
func TestSessionPausesWhileNATSIsDownAndResumes(t *testing.T) {
	ctx := t.Context()
	srv, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{AckTimeout: 300 * time.Millisecond})
	notified := make(chan struct{}, 1)
	g := startGated(t, pub, "outage", func(types.NamespacedName) {
		select {
		case notified <- struct{}{}:
		default:
		}
	})
	r, obj, model, dir := g.r, g.obj, g.model, g.dir

	srv.Stop()
	g.release()
	// The tool ends; its TOOL_CALL_END cannot be acknowledged, so the loop
	// must wait at that boundary and say why.
	down := waitProgress(t, r, obj.UID, "the journal reported unavailable", func(p Progress) bool { return !p.JournalAvailable })
	if down.JournalError == "" {
		t.Error("JournalAvailable is false without an error saying why")
	}
	if down.Phase != agentsv1.PhaseRunning || down.Done {
		t.Errorf("while NATS is down: phase %q, done %v; want Running", down.Phase, down.Done)
	}
	if n := model.calls.Load(); n != 1 {
		t.Errorf("%d model calls while the journal is down, want 1: the loop ran past the boundary", n)
	}
	select {
	case <-notified:
	default:
		t.Error("the controller was not notified")
	}

	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	end := waitProgress(t, r, obj.UID, "the session succeeded with the journal available", func(p Progress) bool {
		return p.Phase == agentsv1.PhaseSucceeded && p.JournalAvailable
	})
	if end.JournalError != "" {
		t.Errorf("JournalError %q after recovery", end.JournalError)
	}
	if end.Result != "done" || end.ToolCalls != 1 || model.calls.Load() != 2 {
		t.Errorf("result %q, tool calls %d, model calls %d; want done, 1, 2", end.Result, end.ToolCalls, model.calls.Load())
	}

	// Nothing is lost: the journal is complete and gap-free, the tool ran
	// once and its result is journaled.
	evs, err := events.Replay(ctx, pub.JetStream(), events.SessionRef{Namespace: obj.Namespace, Name: obj.Name, UID: string(obj.UID)})
	if err != nil {
		t.Fatal(err)
	}
	if err := events.CheckSequence(evs); err != nil {
		t.Error(err)
	}
	if n := len(evs); n == 0 || evs[n-1].Seq != end.LastSeq || evs[n-1].Kind != loop.EventSessionEnd {
		t.Errorf("journal ends at %v, want SESSION_END at seq %d", evs[len(evs)-1], end.LastSeq)
	}
	var ends []loop.Event
	for _, ev := range evs {
		if ev.Kind == loop.EventToolCallEnd {
			ends = append(ends, ev)
		}
	}
	if len(ends) != 1 || !strings.Contains(ends[0].Data.Output, "released") {
		t.Errorf("TOOL_CALL_END events %+v, want one with the tool's output", ends)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "runs.log")); err != nil || string(b) != "ran\n" {
		t.Errorf("runs.log = %q, %v; want the tool to have run once", b, err)
	}
}

// waitProgress polls the runner's progress of uid until cond holds.
func waitProgress(t *testing.T, r *Runner, uid types.UID, what string, cond func(Progress) bool) Progress {
	t.Helper()
	var p Progress
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		p, ok = r.Progress(uid)
		return ok && cond(p), nil
	})
	if err != nil {
		t.Fatalf("waiting until %s: %v (progress %+v)", what, err, p)
	}
	return p
}

// shutdownAtCleanup shuts r down when the test ends.
func shutdownAtCleanup(t *testing.T, r *Runner) {
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = r.Shutdown(sctx)
	})
}

// TestFencedRunnerStopsAtOnce: while a runner's tool runs, another writer
// opens the session's journal (a takeover by a replica that thought this
// one dead). The tool's end cannot be journaled: the runner is fenced, stops
// without a second model call and without failing the session (the other
// writer drives it), and the journal holds nothing the stale runner wrote
// after the takeover.
func TestFencedRunnerStopsAtOnce(t *testing.T) {
	ctx := t.Context()
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{AckTimeout: 300 * time.Millisecond})
	g := startGated(t, pub, "fenced", nil)
	r, obj, model := g.r, g.obj, g.model

	ref := events.SessionRef{Namespace: obj.Namespace, Name: obj.Name, UID: string(obj.UID)}
	_, before, err := pub.OpenJournal(ctx, ref, events.JournalOptions{}) // the takeover
	if err != nil {
		t.Fatal(err)
	}
	g.release()
	end := waitProgress(t, r, obj.UID, "the fenced runner ended", func(p Progress) bool { return p.Done })
	if end.Phase == agentsv1.PhaseFailed || end.Phase == agentsv1.PhaseAborted {
		t.Errorf("the fenced runner set phase %s (%s): the new writer owns the session", end.Phase, end.Error)
	}
	if n := model.calls.Load(); n != 1 {
		t.Errorf("%d model calls, want 1: the fenced runner went on", n)
	}
	after, err := events.Replay(ctx, pub.JetStream(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the journal grew from %d to %d events after the takeover: %v", len(before), len(after), after[len(before):])
	}
}

// gated is a runner driving one scripted session whose only tool call
// blocks on a FIFO until release: startGated returns once the tool runs, so
// its TOOL_CALL_START is durable.
type gated struct {
	r       *Runner
	obj     *agentsv1.AgentSession
	model   *modelCalls
	dir     string
	release func()
}

func startGated(t *testing.T, pub *events.Publisher, name string, notify func(types.NamespacedName)) gated {
	t.Helper()
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	script := &scripted.Script{Turns: []scripted.Turn{
		{Text: "Waiting for the gate.", ToolCalls: []scripted.ToolCall{{Name: "shell",
			Arguments: []byte(`{"command": "cat gate >/dev/null && echo ran >> runs.log && echo released"}`)}}},
		{Text: "done"},
	}}
	model := &modelCalls{Client: scripted.New(script, "demo")}
	r, err := New(Options{
		Reader:   noObjects{},
		Journals: pub,
		Clients:  func(context.Context, ClientConfig) (loop.Client, error) { return model, nil },
		Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
			return localenv.New(dir)
		},
		Notify:         notify,
		NotifyInterval: 10 * time.Millisecond,
		Log:            logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtCleanup(t, r)
	obj := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "wait for the gate",
			Model:  agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo"},
		},
	}
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	// Opening the FIFO for writing returns once the tool opened it for reading.
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			close(opened)
			return
		}
		opened <- f
	}()
	var w *os.File
	select {
	case w = <-opened:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never opened the gate")
	}
	if w == nil {
		t.FailNow()
	}
	return gated{r: r, obj: obj, model: model, dir: dir, release: func() {
		t.Helper()
		if _, err := w.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}}
}
