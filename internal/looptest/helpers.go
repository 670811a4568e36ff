package looptest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// NewClient builds the LLM client a test session talks to, replaying s for
// profile p.
type NewClient func(t *testing.T, p loop.Profile, s *scripted.Script) loop.Client

// NewEnv returns a local execution environment over a fresh temporary
// directory, closed when the test ends, and that directory.
func NewEnv(t *testing.T) (*localenv.Env, string) {
	t.Helper()
	dir := t.TempDir()
	env, err := localenv.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	return env, dir
}

// NewSession validates s and creates a session for p over env whose client
// is built by newClient.
func NewSession(t *testing.T, newClient NewClient, p loop.Profile, env tool.ExecutionEnvironment, s *scripted.Script, opts ...loop.Option) *loop.Session {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	sess, err := loop.New(p, env, newClient(t, p, s), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// Call builds a scripted tool call with args marshalled to JSON. It panics
// on arguments that cannot be marshalled (a bug in the test).
func Call(name string, args any) scripted.ToolCall {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return scripted.ToolCall{Name: name, Arguments: b}
}

// Text is a scripted turn answering with text only.
func Text(s string) scripted.Turn { return scripted.Turn{Text: s} }

// Tools is a scripted turn making the given tool calls.
func Tools(calls ...scripted.ToolCall) scripted.Turn { return scripted.Turn{ToolCalls: calls} }

// Script is a script of the given turns.
func Script(turns ...scripted.Turn) *scripted.Script { return &scripted.Script{Turns: turns} }

// ExpectResult expects the last tool result to contain s.
func ExpectResult(s string) *scripted.Expect { return &scripted.Expect{LastToolResultContains: s} }

// WriteFile writes content to dir/name or fails the test.
func WriteFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Recorder collects every event of a session until the stream closes.
type Recorder struct {
	mu     sync.Mutex
	events []loop.Event
	done   chan struct{}
	seen   chan loop.Event // every event, for tests that wait for one
}

// Record starts collecting the events of s.
func Record(s *loop.Session) *Recorder {
	r := &Recorder{done: make(chan struct{}), seen: make(chan loop.Event, 100000)}
	go func() {
		defer close(r.done)
		for ev := range s.Events() {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
			r.seen <- ev
		}
	}()
	return r
}

// All waits for the stream to close and returns every event.
func (r *Recorder) All(t *testing.T) []loop.Event {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("event stream not closed")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// WaitFor blocks until an event of kind arrives.
func (r *Recorder) WaitFor(t *testing.T, kind loop.EventKind) loop.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-r.seen:
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

// OfKind returns the events of kind k, in order.
func OfKind(evs []loop.Event, k loop.EventKind) []loop.Event {
	var out []loop.Event
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// LastResults returns the results of the last ToolResultsTurn in history.
func LastResults(t *testing.T, s *loop.Session) []llm.ToolResult {
	t.Helper()
	h := s.History()
	for i := len(h) - 1; i >= 0; i-- {
		if r, ok := h[i].(*loop.ToolResultsTurn); ok {
			return r.Results
		}
	}
	t.Fatal("no tool results in history")
	return nil
}

// CustomTool registers a test tool on reg; an empty schema is an object.
func CustomTool(t *testing.T, reg *tool.Registry, name, schema string, exec tool.Executor) {
	t.Helper()
	if schema == "" {
		schema = `{"type":"object"}`
	}
	if err := reg.Register(tool.Registered{
		Definition: tool.Definition{Name: name, Description: "test tool " + name, Parameters: json.RawMessage(schema)},
		Executor:   exec,
	}); err != nil {
		t.Fatal(err)
	}
}
