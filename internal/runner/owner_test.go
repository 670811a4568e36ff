package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// pipeConn joins the client ends of two pipes.
type pipeConn struct {
	*io.PipeReader
	*io.PipeWriter
}

func (c pipeConn) Close() error { c.PipeWriter.Close(); return c.PipeReader.Close() }

// servedExecutor serves a local environment over root through the real
// executor protocol (one serve "process" of a pod whose owner records are
// in owners) and returns a client presenting o.
func servedExecutor(t *testing.T, root, owners string, o executor.Owner) (*executor.Client, error) {
	t.Helper()
	env, err := localenv.New(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	go func() {
		_ = executor.Serve(context.Background(), sr, sw, env, executor.ServeOptions{OwnerDir: owners})
		sw.Close()
	}()
	c, err := executor.NewClientContext(t.Context(), pipeConn{cr, cw}, executor.WithOwner(o))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// TestSupersededRunnerStopsAtOnce: while the runner's first tool runs, a
// newer driver of the session uses the workspace. The runner's next tool
// call is refused by the executor: the runner stops at once, detached (the
// session is neither failed nor aborted, the refused command never ran, no
// further model call), and tells the controller to leave the session to
// the newer driver for a claim's duration.
func TestSupersededRunnerStopsAtOnce(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{AckTimeout: 300 * time.Millisecond})
	dir, owners := t.TempDir(), t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	script := &scripted.Script{Turns: []scripted.Turn{
		{Text: "Waiting for the gate.", ToolCalls: []scripted.ToolCall{{Name: "shell",
			Arguments: []byte(`{"command": "cat gate >/dev/null && echo ran >> runs.log"}`)}}},
		{Text: "Once more.", ToolCalls: []scripted.ToolCall{{Name: "shell",
			Arguments: []byte(`{"command": "echo stale >> runs.log"}`)}}},
		{Text: "done"},
	}}
	model := &modelCalls{Client: scripted.New(script, "demo")}
	obj := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "superseded", UID: types.UID("uid-superseded")},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "wait for the gate",
			Model:  agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo"},
		},
	}
	// This runner has no claims (Driver{}); the factory stands in for one
	// that holds the session's claim at epoch 3.
	mine := executor.Owner{SessionUID: string(obj.UID), Holder: "ns-a/ao/ao-1", Epoch: 3}
	var mu sync.Mutex
	var drivers []Driver
	r, err := New(Options{
		Reader:   noObjects{},
		Journals: pub,
		Clients:  func(context.Context, ClientConfig) (loop.Client, error) { return model, nil },
		Envs: func(_ context.Context, _ *agentsv1.AgentSession, _ string, d Driver) (tool.ExecutionEnvironment, error) {
			mu.Lock()
			drivers = append(drivers, d)
			mu.Unlock()
			return servedExecutor(t, dir, owners, mine)
		},
		NotifyInterval: 10 * time.Millisecond,
		Log:            logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtCleanup(t, r)
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(gate, os.O_WRONLY, 0) // returns once the first tool runs
	if err != nil {
		t.Fatal(err)
	}

	// The takeover: a newer driver's stream to the same pod.
	newer := executor.Owner{SessionUID: string(obj.UID), Holder: "ns-b/ao/ao-9", Epoch: 4}
	nc, err := servedExecutor(t, t.TempDir(), owners, newer)
	if err != nil {
		t.Fatalf("the newer driver: %v", err)
	}
	if _, err := nc.FileExists(t.Context(), "."); err != nil {
		t.Fatalf("the newer driver's call: %v", err)
	}
	if _, err := w.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()

	end := waitProgress(t, r, obj.UID, "the superseded runner ended", func(p Progress) bool { return p.Done })
	if end.Phase == agentsv1.PhaseFailed || end.Phase == agentsv1.PhaseAborted || end.Phase == agentsv1.PhaseSucceeded {
		t.Errorf("the superseded runner set phase %s (%s): the newer driver owns the session", end.Phase, end.Error)
	}
	if !strings.Contains(end.Foreign, `"ns-b/ao/ao-9" (claim epoch 4)`) || !end.ForeignUntil.After(time.Now()) {
		t.Errorf("Foreign %q until %s, want the newer driver for a claim's duration", end.Foreign, end.ForeignUntil)
	}
	if n := model.calls.Load(); n != 2 {
		t.Errorf("%d model calls, want 2: the runner went on after the refusal", n)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "runs.log")); err != nil || string(b) != "ran\n" {
		t.Errorf("runs.log = %q, %v; want only the call made before the takeover", b, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(drivers) != 1 || drivers[0] != (Driver{}) {
		t.Errorf("drivers passed to the factory = %+v, want one zero Driver (no claims)", drivers)
	}
	// The refusal is what the executor says, through the stream.
	if _, err := servedExecutor(t, dir, owners, mine); !errors.Is(err, executor.ErrNotOwner) {
		t.Errorf("a new stream of the superseded driver = %v, want ErrNotOwner", err)
	}
}

func TestDriverOfAClaim(t *testing.T) {
	me := claim.Holder{Install: "ns-a/ao", Pod: "ao-1"}
	tests := []struct {
		name string
		cl   *claim.Claim
		want Driver
	}{
		{"no claims: unchecked", nil, Driver{}},
		{"a created claim", &claim.Claim{Fence: 0}, Driver{Holder: "ns-a/ao/ao-1", Epoch: 0}},
		{"a claim taken over", &claim.Claim{Fence: 7}, Driver{Holder: "ns-a/ao/ao-1", Epoch: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := driverOf(me, tt.cl); got != tt.want {
				t.Errorf("driverOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}
