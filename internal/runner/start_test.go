package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// openableEnv is a local environment that can be opened ahead (like
// k8senv.Env): Open blocks until release is closed (nil: at once), counts
// its calls, and fails with err.
type openableEnv struct {
	*localenv.Env
	started chan struct{} // closed when Open is first called
	release chan struct{}
	err     error
	opens   atomic.Int32
	once    sync.Once
}

func newOpenableEnv(t *testing.T, err error) *openableEnv {
	t.Helper()
	env, lerr := localenv.New(t.TempDir())
	if lerr != nil {
		t.Fatal(lerr)
	}
	return &openableEnv{Env: env, started: make(chan struct{}), err: err}
}

func (e *openableEnv) Open(ctx context.Context) error {
	e.opens.Add(1)
	e.once.Do(func() { close(e.started) })
	if e.release != nil {
		select {
		case <-e.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.err
}

// TestStartStagesAndOpenAhead runs one scripted session with one tool call
// through the Runner: each start stage is reported exactly once, and the
// workspace's connection starts opening before the LLM client is built
// (once, before the first tool call).
func TestStartStagesAndOpenAhead(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	env := newOpenableEnv(t, nil)
	script := &scripted.Script{Turns: []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: []byte(`{"command": "echo hi"}`)}}},
		{Text: "done"},
	}}
	var (
		mu     sync.Mutex
		stages = map[string]int{}
	)
	r, err := New(Options{
		Reader:   noObjects{},
		Journals: pub,
		Clients: func(ctx context.Context, _ ClientConfig) (loop.Client, error) {
			select {
			case <-env.started:
				return scripted.New(script, "demo"), nil
			case <-time.After(30 * time.Second):
				return nil, errors.New("the workspace's connection did not start opening before the LLM client was built")
			}
		},
		Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
			return env, nil
		},
		StartStage: func(stage string, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			stages[stage]++
		},
		NotifyInterval: 10 * time.Millisecond,
		Log:            logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtCleanup(t, r)
	obj := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "stages", UID: types.UID("uid-stages")},
		Spec: agentsv1.AgentSessionSpec{Prompt: "say hi",
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo"}},
	}
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Done })
	if end.Phase != agentsv1.PhaseSucceeded || end.ToolCalls != 1 {
		t.Fatalf("phase %s (%s), %d tool calls; want Succeeded after 1", end.Phase, end.Error, end.ToolCalls)
	}
	if n := env.opens.Load(); n != 1 {
		t.Errorf("the workspace was opened %d times, want once", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, stage := range []string{StageRunnerClaim, StageBuild, StageFirstToolCall, StageRunnerToFirstTool} {
		if stages[stage] != 1 {
			t.Errorf("stage %s reported %d times, want once", stage, stages[stage])
		}
	}
	if len(stages) != 4 {
		t.Errorf("stages %v, want the four of the runner", stages)
	}
}

// TestOpeningEnv: calls wait for the early open; its error goes to the
// first call alone, unchanged, and later calls reach the environment; a
// call that gives up while the open runs returns its own context's error.
func TestOpeningEnv(t *testing.T) {
	refused := fmt.Errorf("open stream: %w", executor.ErrNotOwner)
	cases := []struct {
		name       string
		openErr    error
		hang       bool  // the open does not end while the first call waits
		wantFirst  error // nil: the first call succeeds
		wantSecond bool  // the second call succeeds
	}{
		{"open succeeds", nil, false, nil, true},
		{"open fails", ErrConfig, false, ErrConfig, true},
		{"open refused as a superseded driver", refused, false, executor.ErrNotOwner, true},
		{"caller gives up while the open runs", nil, true, context.DeadlineExceeded, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inner := newOpenableEnv(t, tc.openErr)
			release := make(chan struct{})
			inner.release = release
			env := startOpen(t.Context(), inner)
			<-inner.started
			ctx := t.Context()
			if tc.hang {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
				defer cancel()
			} else {
				close(release)
			}
			_, err := env.FileExists(ctx, ".")
			if !errors.Is(err, tc.wantFirst) || (tc.wantFirst == nil && err != nil) {
				t.Errorf("first call = %v, want %v", err, tc.wantFirst)
			}
			if tc.hang {
				close(release)
			}
			if _, err := env.FileExists(t.Context(), "."); (err == nil) != tc.wantSecond {
				t.Errorf("second call = %v", err)
			}
			if n := inner.opens.Load(); n != 1 {
				t.Errorf("%d opens, want 1", n)
			}
		})
	}
}

// An environment that cannot be opened ahead is used as it is.
func TestStartOpenKeepsPlainEnvironments(t *testing.T) {
	env, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := startOpen(t.Context(), env); got != tool.ExecutionEnvironment(env) {
		t.Errorf("startOpen wrapped a plain environment: %T", got)
	}
}

// The optional interfaces of the environment (conditional writes, web
// fetch, stdio processes) stay reachable through the opening wrapper.
func TestOpeningEnvKeepsOptionalInterfaces(t *testing.T) {
	inner := newOpenableEnv(t, nil)
	env := startOpen(t.Context(), inner)
	if _, ok := env.(tool.ConditionalWriter); !ok {
		t.Error("no tool.ConditionalWriter")
	}
	if _, ok := env.(tool.Fetcher); !ok {
		t.Error("no tool.Fetcher")
	}
	st, ok := env.(stdioStarter)
	if !ok {
		t.Fatal("no stdioStarter")
	}
	// The local environment runs stdio processes: the wrapper passes on.
	rwc, err := st.StartStdio(t.Context(), []string{"cat"}, nil, "")
	if err != nil {
		t.Fatalf("StartStdio = %v", err)
	}
	if err := rwc.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if err := tool.WriteFileIf(t.Context(), env, "new.txt", []byte("x"), ""); err != nil {
		t.Errorf("WriteFileIf = %v", err)
	}
}
