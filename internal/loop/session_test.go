package loop_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestNewValidates(t *testing.T) {
	env, _ := newEnv(t)
	client := scripted.New(script(text("hi")), "m")
	p := anthropic()
	tests := []struct {
		name string
		do   func() (*loop.Session, error)
	}{
		{"nil profile", func() (*loop.Session, error) { return loop.New(nil, env, client) }},
		{"nil env", func() (*loop.Session, error) { return loop.New(p, nil, client) }},
		{"nil client", func() (*loop.Session, error) { return loop.New(p, env, nil) }},
		{"negative max turns", func() (*loop.Session, error) {
			cfg := loop.DefaultConfig()
			cfg.MaxTurns = -1
			return loop.New(p, env, client, loop.WithConfig(cfg))
		}},
		{"zero event buffer", func() (*loop.Session, error) { return loop.New(p, env, client, loop.WithEventBuffer(0)) }},
		{"nil clock", func() (*loop.Session, error) { return loop.New(p, env, client, loop.WithClock(nil)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.do(); err == nil {
				t.Fatal("New accepted invalid arguments")
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := loop.DefaultConfig()
	if c.MaxTurns != 0 || c.MaxToolRoundsPerInput != 0 || c.MaxCommandTimeout.Seconds() != 600 ||
		!c.EnableLoopDetection || c.LoopDetectionWindow != 10 || c.MaxSubagentDepth != 1 || c.ReasoningEffort != "" {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if loop.DefaultCommandTimeout.Seconds() != 10 {
		t.Errorf("DefaultCommandTimeout = %v", loop.DefaultCommandTimeout)
	}
}

// TestSubmitToolLoop covers creation, the agentic loop, natural completion
// and multiple sequential inputs, with the events bracketing the session.
func TestSubmitToolLoop(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "complete"}[streaming], func(t *testing.T) {
			env, dir := newEnv(t)
			p := withCaps(anthropic(), func(c *loop.Capabilities) { c.Streaming = streaming })
			s := newSession(t, p, env, script(
				tools(call("write_file", map[string]string{"file_path": "hello.py", "content": "print('Hello World')\n"})),
				scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "hello.py"}, Text: "Created hello.py with a greeting."},
				tools(call("edit_file", map[string]string{"file_path": "hello.py", "old_string": "print('Hello World')", "new_string": "print('Hello World')\nprint('Goodbye')"})),
				text("Added the goodbye line."),
			))
			rec := record(s)
			if err := s.Submit(t.Context(), "Create hello.py"); err != nil {
				t.Fatal(err)
			}
			mustf(t, s.State() == loop.StateIdle, "state %s after natural completion", s.State())
			if err := s.Submit(t.Context(), "Add a goodbye line"); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "hello.py"))
			if err != nil || !strings.Contains(string(got), "Hello") || !strings.Contains(string(got), "Goodbye") {
				t.Fatalf("hello.py = %q, %v", got, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			evs := rec.All(t)
			checkSeq(t, evs)
			round := []loop.EventKind{loop.EventUserInput,
				loop.EventAssistantTextStart, loop.EventAssistantTextEnd, loop.EventToolCallStart, loop.EventToolCallEnd,
				loop.EventAssistantTextStart, loop.EventAssistantTextEnd, loop.EventSessionEnd}
			want := append([]loop.EventKind{loop.EventSessionStart}, round...)
			want = append(want, round...)
			want = append(want, loop.EventSessionEnd)
			if got := kinds(evs); !slices.Equal(got, want) {
				t.Errorf("events:\n got %v\nwant %v", got, want)
			}
			deltas := ofKind(evs, loop.EventAssistantTextDelta)
			if streaming != (len(deltas) > 0) {
				t.Errorf("streaming=%v but %d text deltas", streaming, len(deltas))
			}
			ends := ofKind(evs, loop.EventSessionEnd)
			if ends[0].Data.State != "IDLE" || ends[len(ends)-1].Data.State != "CLOSED" {
				t.Errorf("SESSION_END states %q ... %q", ends[0].Data.State, ends[len(ends)-1].Data.State)
			}
			mustf(t, s.State() == loop.StateClosed, "state %s after Close", s.State())
			if err := s.Submit(t.Context(), "more"); !errors.Is(err, loop.ErrClosed) {
				t.Errorf("Submit after Close = %v, want ErrClosed", err)
			}
		})
	}
}

func endlessCalls(n int) *scripted.Script {
	var turns []scripted.Turn
	for i := range n {
		turns = append(turns, tools(call("shell", map[string]any{"command": "echo " + strings.Repeat("x", i%7+1)})))
	}
	return script(turns...)
}

func TestRoundLimit(t *testing.T) {
	env, _ := newEnv(t)
	cfg := loop.DefaultConfig()
	cfg.MaxToolRoundsPerInput = 2
	s := newSession(t, anthropic(), env, endlessCalls(10), loop.WithConfig(cfg))
	rec := record(s)
	if err := s.Submit(t.Context(), "loop forever"); err != nil {
		t.Fatal(err)
	}
	mustf(t, s.State() == loop.StateIdle, "state %s", s.State())
	// The per-input counter restarts: the second input may run 2 rounds too.
	if err := s.Submit(t.Context(), "again"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	evs := rec.All(t)
	limits := ofKind(evs, loop.EventTurnLimit)
	if len(limits) != 2 || limits[0].Data.Round != 2 || limits[1].Data.Round != 2 {
		t.Fatalf("TURN_LIMIT events %+v", limits)
	}
	if n := len(ofKind(evs, loop.EventToolCallEnd)); n != 4 {
		t.Errorf("%d tool calls ran, want 4", n)
	}
}

func TestMaxTurnsAcrossInputs(t *testing.T) {
	env, _ := newEnv(t)
	cfg := loop.DefaultConfig()
	cfg.MaxTurns = 3
	s := newSession(t, anthropic(), env, endlessCalls(10), loop.WithConfig(cfg))
	rec := record(s)
	if err := s.Submit(t.Context(), "first"); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(t.Context(), "second"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	evs := rec.All(t)
	limits := ofKind(evs, loop.EventTurnLimit)
	if len(limits) != 2 || limits[0].Data.TotalTurns != 3 || limits[1].Data.TotalTurns != 3 {
		t.Fatalf("TURN_LIMIT events %+v", limits)
	}
	if n := len(ofKind(evs, loop.EventAssistantTextEnd)); n != 3 {
		t.Errorf("%d model calls, want 3 for the whole session", n)
	}
	mustf(t, s.TurnCount() == 3, "TurnCount %d", s.TurnCount())
}

// TestAbort cancels Submit while a command runs: the process group is
// killed, SESSION_END closes the stream and the session is CLOSED.
func TestAbort(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			env, dir := newEnv(t)
			s := newSession(t, anthropic(), env, script(
				tools(call("shell", map[string]any{"command": "echo $$ > pid; sleep 30 & echo $! > child; wait", "timeout_ms": 60000})),
				text("never reached"),
			))
			rec := record(s)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- s.Submit(ctx, "run a long command") }()
			rec.WaitFor(t, loop.EventToolCallStart)
			child := waitPidFile(t, filepath.Join(dir, "child"))
			if how == "cancel" {
				cancel()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			err := <-errc
			if err == nil {
				t.Fatal("Submit returned nil after abort")
			}
			if how == "close" && !errors.Is(err, loop.ErrClosed) {
				t.Errorf("Submit after Close = %v, want ErrClosed", err)
			}
			mustf(t, s.State() == loop.StateClosed, "state %s", s.State())
			evs := rec.All(t)
			checkSeq(t, evs)
			last := evs[len(evs)-1]
			if last.Kind != loop.EventSessionEnd || last.Data.State != "CLOSED" {
				t.Errorf("last event %s %q", last.Kind, last.Data.State)
			}
			end := ofKind(evs, loop.EventToolCallEnd)
			if len(end) != 1 || !end[0].Data.IsError {
				t.Errorf("tool call not ended as error: %+v", end)
			}
			if processAlive(child) {
				t.Errorf("background process %d survived the abort", child)
			}
		})
	}
}

func TestCloseIdle(t *testing.T) {
	env, _ := newEnv(t)
	s := newSession(t, anthropic(), env, script(text("hi")))
	rec := record(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := kinds(rec.All(t)); !slices.Equal(got, []loop.EventKind{loop.EventSessionStart, loop.EventSessionEnd}) {
		t.Errorf("events %v", got)
	}
}

// TestLoopDetection: ten identical calls trigger the exact warning as a
// SteeringTurn and a LOOP_DETECTION event.
func TestLoopDetection(t *testing.T) {
	env, _ := newEnv(t)
	var turns []scripted.Turn
	for range 10 {
		turns = append(turns, tools(call("shell", map[string]any{"command": "true"})))
	}
	const warning = "Loop detected: the last 10 tool calls follow a repeating pattern. Try a different approach."
	turns = append(turns, scripted.Turn{Expect: &scripted.Expect{LastUserContains: warning}, Text: "Trying something else."})
	s := newSession(t, anthropic(), env, script(turns...))
	rec := record(s)
	if err := s.Submit(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	evs := rec.All(t)
	ld := ofKind(evs, loop.EventLoopDetection)
	if len(ld) != 1 || ld[0].Data.Message != warning {
		t.Fatalf("LOOP_DETECTION events %+v", ld)
	}
	h := s.History()
	var steering []string
	for _, turn := range h {
		if st, ok := turn.(*loop.SteeringTurn); ok {
			steering = append(steering, st.Content)
		}
	}
	if !slices.Equal(steering, []string{warning}) {
		t.Errorf("steering turns %q", steering)
	}
}

func TestLoopDetectionDisabled(t *testing.T) {
	env, _ := newEnv(t)
	var turns []scripted.Turn
	for range 10 {
		turns = append(turns, tools(call("shell", map[string]any{"command": "true"})))
	}
	cfg := loop.DefaultConfig()
	cfg.EnableLoopDetection = false
	s := newSession(t, anthropic(), env, script(append(turns, text("done"))...), loop.WithConfig(cfg))
	rec := record(s)
	if err := s.Submit(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if n := len(ofKind(rec.All(t), loop.EventLoopDetection)); n != 0 {
		t.Errorf("%d LOOP_DETECTION events with detection disabled", n)
	}
}

// TestToolErrorsBecomeResults: unknown tool, invalid arguments, executor
// error, panic and a failing command are all error results the model sees.
func TestToolErrorsBecomeResults(t *testing.T) {
	tests := []struct {
		name string
		call scripted.ToolCall
		want string
	}{
		{"unknown tool", call("no_such_tool", map[string]any{}), "Unknown tool: no_such_tool"},
		{"invalid arguments", call("read_file", map[string]any{"file_path": 42}), "Tool error (read_file): invalid arguments"},
		{"missing required", call("shell", map[string]any{}), "Tool error (shell): invalid arguments"},
		{"executor error", call("fails", map[string]any{}), "Tool error (fails): disk on fire"},
		{"panic", call("panics", map[string]any{}), "Tool error (panics): panic: boom"},
		{"missing file", call("read_file", map[string]any{"file_path": "nope.txt"}), "nope.txt"},
		{"non-zero exit", call("shell", map[string]any{"command": "echo oops; exit 3"}), "oops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := newEnv(t)
			p := profile.Anthropic("claude-sonnet-4-5")
			customTool(t, p.Registry(), "fails", "", func(context.Context, *tool.Invocation) (tool.Result, error) {
				return tool.Result{}, errors.New("disk on fire")
			})
			customTool(t, p.Registry(), "panics", "", func(context.Context, *tool.Invocation) (tool.Result, error) {
				panic("boom")
			})
			s := newSession(t, p, env, script(
				tools(tt.call),
				scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: tt.want}, Text: "recovered"},
			))
			rec := record(s)
			if err := s.Submit(t.Context(), "go"); err != nil {
				t.Fatal(err)
			}
			res := lastResults(t, s)
			if len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Content, tt.want) {
				t.Errorf("result %+v, want error containing %q", res, tt.want)
			}
			_ = s.Close()
			end := ofKind(rec.All(t), loop.EventToolCallEnd)
			if len(end) != 1 || !end[0].Data.IsError {
				t.Errorf("TOOL_CALL_END %+v", end)
			}
		})
	}
}

func TestErrorTable(t *testing.T) {
	tests := []struct {
		kind      llm.ErrorKind
		warning   bool
		wantState loop.State
	}{
		{llm.KindAuthentication, false, loop.StateClosed},
		{llm.KindContextLength, true, loop.StateClosed},
		{llm.KindServer, false, loop.StateClosed},
		{llm.KindInvalidRequest, false, loop.StateClosed},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			env, _ := newEnv(t)
			s := newSession(t, anthropic(), env, script(scripted.Turn{Error: &scripted.Error{Kind: tt.kind, Message: "nope"}}))
			rec := record(s)
			err := s.Submit(t.Context(), "go")
			if llm.KindOf(err) != tt.kind {
				t.Fatalf("Submit = %v, want a %s error", err, tt.kind)
			}
			mustf(t, s.State() == tt.wantState, "state %s", s.State())
			evs := rec.All(t)
			errs := ofKind(evs, loop.EventError)
			if len(errs) != 1 || errs[0].Data.ErrorKind != string(tt.kind) {
				t.Errorf("ERROR events %+v", errs)
			}
			if got := len(ofKind(evs, loop.EventWarning)) > 0; got != tt.warning {
				t.Errorf("WARNING emitted = %v, want %v", got, tt.warning)
			}
			last := evs[len(evs)-1]
			if last.Kind != loop.EventSessionEnd || last.Data.State != "CLOSED" || last.Data.Error == "" {
				t.Errorf("last event %+v", last)
			}
		})
	}
}

func TestContextUsageWarning(t *testing.T) {
	env, _ := newEnv(t)
	// 1 token ~ 4 chars: a 1,000-token window warns above 3,200 characters.
	p := withCaps(anthropic(), func(c *loop.Capabilities) { c.ContextWindow = 1000 })
	cfg := loop.DefaultConfig()
	cfg.Compaction.Disabled = true // compaction would keep usage under the warning
	s := newSession(t, p, env, script(text("short"), text("short")), loop.WithConfig(cfg))
	rec := record(s)
	if err := s.Submit(t.Context(), "small input"); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(t.Context(), strings.Repeat("y", 3600)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	w := ofKind(rec.All(t), loop.EventWarning)
	if len(w) != 1 || w[0].Data.Message != "Context usage at ~91% of context window" {
		t.Errorf("WARNING events %+v", w)
	}
}

func TestAwaitingInput(t *testing.T) {
	env, _ := newEnv(t)
	s := newSession(t, anthropic(), env, script(
		text("Which file should I change?"),
		scripted.Turn{Expect: &scripted.Expect{LastUserContains: "main.go"}, Text: "Done."},
	))
	rec := record(s)
	if err := s.Submit(t.Context(), "fix it"); err != nil {
		t.Fatal(err)
	}
	mustf(t, s.State() == loop.StateAwaitingInput, "state %s", s.State())
	if err := s.Submit(t.Context(), "main.go"); err != nil {
		t.Fatal(err)
	}
	mustf(t, s.State() == loop.StateIdle, "state %s", s.State())
	_ = s.Close()
	ends := ofKind(rec.All(t), loop.EventSessionEnd)
	if ends[0].Data.State != string(loop.StateAwaitingInput) {
		t.Errorf("first SESSION_END state %q", ends[0].Data.State)
	}
}

func TestCanTransition(t *testing.T) {
	all := []loop.State{loop.StateIdle, loop.StateProcessing, loop.StateAwaitingInput, loop.StateClosed}
	allowed := map[[2]loop.State]bool{
		{loop.StateIdle, loop.StateProcessing}:          true,
		{loop.StateProcessing, loop.StateProcessing}:    true,
		{loop.StateProcessing, loop.StateAwaitingInput}: true,
		{loop.StateProcessing, loop.StateIdle}:          true,
		{loop.StateProcessing, loop.StateClosed}:        true,
		{loop.StateIdle, loop.StateClosed}:              true,
		{loop.StateAwaitingInput, loop.StateClosed}:     true,
		{loop.StateAwaitingInput, loop.StateProcessing}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := loop.CanTransition(from, to); got != allowed[[2]loop.State{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %v", from, to, got)
			}
		}
	}
}

func TestSubmitWhileBusy(t *testing.T) {
	env, _ := newEnv(t)
	p := profile.Anthropic("claude-sonnet-4-5")
	release := make(chan struct{})
	started := make(chan struct{})
	customTool(t, p.Registry(), "block", "", func(ctx context.Context, _ *tool.Invocation) (tool.Result, error) {
		close(started)
		<-release
		return tool.Result{Output: "ok"}, nil
	})
	s := newSession(t, p, env, script(tools(call("block", map[string]any{})), text("done")))
	rec := record(s)
	errc := make(chan error, 1)
	go func() { errc <- s.Submit(t.Context(), "first") }()
	<-started
	if err := s.Submit(t.Context(), "second"); !errors.Is(err, loop.ErrBusy) {
		t.Errorf("concurrent Submit = %v, want ErrBusy", err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rec.All(t)
}
