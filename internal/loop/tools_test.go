package loop_test

import (
	"context"
	"encoding/json"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestParallelToolCalls: with parallel support all calls of a round run at
// once (a barrier only opens when every call has arrived); without it they
// run one by one. Results keep call order either way.
func TestParallelToolCalls(t *testing.T) {
	for _, parallel := range []bool{true, false} {
		t.Run(map[bool]string{true: "parallel", false: "sequential"}[parallel], func(t *testing.T) {
			env, _ := newEnv(t)
			base := profile.Gemini("gemini-2.5-pro")
			const n = 4
			var running, maxRunning atomic.Int32
			var arrived sync.WaitGroup
			arrived.Add(n)
			customTool(t, base.Registry(), "probe", `{"type":"object","properties":{"i":{"type":"integer"}},"required":["i"]}`,
				func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
					cur := running.Add(1)
					defer running.Add(-1)
					for {
						m := maxRunning.Load()
						if cur <= m || maxRunning.CompareAndSwap(m, cur) {
							break
						}
					}
					if parallel {
						arrived.Done()
						arrived.Wait() // deadlocks unless all calls run concurrently
					}
					var a struct{ I int }
					_ = json.Unmarshal(inv.Arguments, &a)
					return tool.Result{Output: strings.Repeat("r", a.I+1)}, nil
				})
			p := withCaps(base, func(c *loop.Capabilities) { c.ParallelToolCalls = parallel })
			var calls []scripted.ToolCall
			for i := range n {
				calls = append(calls, call("probe", map[string]int{"i": i}))
			}
			s := newSession(t, p, env, script(tools(calls...), text("done")))
			rec := record(s)
			if err := s.Submit(t.Context(), "probe"); err != nil {
				t.Fatal(err)
			}
			res := lastResults(t, s)
			for i, r := range res {
				if r.CallID != calls[i].ID && r.CallID == "" || r.Content != strings.Repeat("r", i+1) {
					t.Errorf("result %d = %+v (order lost)", i, r)
				}
			}
			if len(res) != n {
				t.Fatalf("%d results for %d calls", len(res), n)
			}
			if want := map[bool]int32{true: n, false: 1}[parallel]; maxRunning.Load() != want {
				t.Errorf("max concurrency %d, want %d", maxRunning.Load(), want)
			}
			_ = s.Close()
			rec.All(t)
		})
	}
}

// TestTruncation: the model gets the truncated output with the marker, the
// TOOL_CALL_END event the full output; limits are overridable.
func TestTruncation(t *testing.T) {
	tests := []struct {
		name       string
		limits     map[string]int
		lines      map[string]int
		wantMarker string
		wantLen    int
	}{
		{"default read_file limit", nil, nil, "[WARNING: Tool output was truncated. 50", 50_000},
		{"char limit override", map[string]int{"read_file": 1000}, nil, "[WARNING: Tool output was truncated.", 1000},
		{"line limit override", map[string]int{"read_file": 0}, map[string]int{"read_file": 10}, " lines omitted ...]", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, dir := newEnv(t)
			big := strings.Repeat(strings.Repeat("x", 4999)+"\n", 20) // 100,000 chars, 21 lines
			if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(big), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := loop.DefaultConfig()
			cfg.ToolOutputLimits, cfg.ToolLineLimits = tt.limits, tt.lines
			s := newSession(t, anthropic(), env, script(
				tools(call("read_file", map[string]any{"file_path": "big.txt"})),
				scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: tt.wantMarker}, Text: "read it"},
			), loop.WithConfig(cfg))
			rec := record(s)
			if err := s.Submit(t.Context(), "Read big.txt"); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			end := ofKind(rec.All(t), loop.EventToolCallEnd)[0]
			if n := strings.Count(end.Data.Output, "x"); n != 99_980 {
				t.Errorf("TOOL_CALL_END carries %d x, want the full 99,980", n)
			}
			res := lastResults(t, s)[0]
			// The kept text is the limit plus the marker (about 250 characters).
			if tt.wantLen > 0 && (len(res.Content) < tt.wantLen || len(res.Content) > tt.wantLen+300) {
				t.Errorf("model got %d characters, want the %d-character limit plus the marker", len(res.Content), tt.wantLen)
			}
		})
	}
}

// TestSteeringAndFollowUp: a steer sent during a tool round is injected
// after it as a SteeringTurn (a user message for the model); a follow-up
// runs after the input completes.
func TestSteeringAndFollowUp(t *testing.T) {
	env, _ := newEnv(t)
	p := profile.Anthropic("claude-sonnet-4-5")
	var s *loop.Session
	customTool(t, p.Registry(), "work", "", func(context.Context, *tool.Invocation) (tool.Result, error) {
		s.Steer("Actually, only add a /health endpoint")
		s.FollowUp("Now write a test for it")
		return tool.Result{Output: "worked"}, nil
	})
	spy := &spyClient{inner: scripted.New(script(
		tools(call("work", map[string]any{})),
		scripted.Turn{Expect: &scripted.Expect{LastUserContains: "only add a /health endpoint"}, Text: "Adjusted."},
		scripted.Turn{Expect: &scripted.Expect{LastUserContains: "write a test"}, Text: "Test written."},
	), "m")}
	var err error
	s, err = loop.New(p, env, spy)
	if err != nil {
		t.Fatal(err)
	}
	s.Steer("Use Go 1.26") // idle: delivered with the next Submit
	rec := record(s)
	if err := s.Submit(t.Context(), "Create a web app"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	evs := rec.All(t)
	want := []loop.EventKind{loop.EventSessionStart, loop.EventUserInput, loop.EventSteeringInjected,
		loop.EventAssistantTextStart, loop.EventAssistantTextEnd, loop.EventToolCallStart, loop.EventToolCallEnd,
		loop.EventSteeringInjected, loop.EventAssistantTextStart, loop.EventAssistantTextEnd,
		loop.EventUserInput, loop.EventAssistantTextStart, loop.EventAssistantTextEnd, loop.EventSessionEnd, loop.EventSessionEnd}
	if got := kinds(evs); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	if ui := ofKind(evs, loop.EventUserInput); !ui[1].Data.FollowUp || ui[0].Data.FollowUp {
		t.Errorf("USER_INPUT follow-up flags %v %v", ui[0].Data.FollowUp, ui[1].Data.FollowUp)
	}
	// History order: tool results, then the steering turn; both steering
	// turns become user-role messages.
	h := s.History()
	var order []string
	for _, turn := range h {
		switch turn.(type) {
		case *loop.UserTurn:
			order = append(order, "user")
		case *loop.SteeringTurn:
			order = append(order, "steering")
		case *loop.AssistantTurn:
			order = append(order, "assistant")
		case *loop.ToolResultsTurn:
			order = append(order, "results")
		}
	}
	wantOrder := []string{"user", "steering", "assistant", "results", "steering", "assistant", "user", "assistant"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("history %v, want %v", order, wantOrder)
	}
	req := spy.requests()[1]
	var roles []llm.Role
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	wantRoles := []llm.Role{llm.RoleSystem, llm.RoleUser, llm.RoleUser, llm.RoleAssistant, llm.RoleTool, llm.RoleUser}
	if !slices.Equal(roles, wantRoles) {
		t.Errorf("request roles %v, want %v", roles, wantRoles)
	}
}

// TestReasoningEffort: the configured effort reaches the request and a
// change mid-session applies to the next call.
func TestReasoningEffort(t *testing.T) {
	env, _ := newEnv(t)
	p := profile.OpenAI("gpt-5.2-codex")
	var s *loop.Session
	customTool(t, p.Registry(), "think_less", "", func(context.Context, *tool.Invocation) (tool.Result, error) {
		s.SetReasoningEffort("low")
		return tool.Result{Output: "ok"}, nil
	})
	high, low, none := "high", "low", ""
	cfg := loop.DefaultConfig()
	cfg.ReasoningEffort = "high"
	var err error
	s, err = loop.New(p, env, scripted.New(script(
		scripted.Turn{Expect: &scripted.Expect{ReasoningEffort: &high}, ToolCalls: []scripted.ToolCall{call("think_less", map[string]any{})}},
		scripted.Turn{Expect: &scripted.Expect{ReasoningEffort: &low}, Text: "done"},
		scripted.Turn{Expect: &scripted.Expect{ReasoningEffort: &none}, Text: "provider default"},
	), "m"), loop.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	rec := record(s)
	if err := s.Submit(t.Context(), "think"); err != nil {
		t.Fatal(err)
	}
	s.SetReasoningEffort("")
	if err := s.Submit(t.Context(), "again"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rec.All(t)
}

// TestShellOutputDeltas: shell output streams as TOOL_CALL_OUTPUT_DELTA
// events between TOOL_CALL_START and TOOL_CALL_END.
func TestShellOutputDeltas(t *testing.T) {
	env, _ := newEnv(t)
	s := newSession(t, anthropic(), env, script(
		tools(call("shell", map[string]any{"command": "for i in 1 2 3; do echo line$i; done"})),
		text("ok"),
	))
	rec := record(s)
	if err := s.Submit(t.Context(), "run"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	evs := rec.All(t)
	var got strings.Builder
	inside := false
	for _, e := range evs {
		switch e.Kind {
		case loop.EventToolCallStart:
			inside = true
		case loop.EventToolCallEnd:
			inside = false
		case loop.EventToolCallOutputDelta:
			if !inside || e.Data.CallID == "" {
				t.Errorf("delta outside its call: %+v", e)
			}
			got.WriteString(e.Data.Delta)
		}
	}
	if got.String() != "line1\nline2\nline3\n" {
		t.Errorf("deltas = %q", got.String())
	}
}

func TestToolPolicy(t *testing.T) {
	rules := loop.Rules{
		Commands: []loop.CommandRule{
			{Pattern: "rm -rf *", Decision: loop.Deny, Reason: "destructive"},
			{Pattern: "curl *", Decision: loop.Ask, Reason: "network download"},
		},
		Tools: map[string]loop.Decision{"write_file": loop.Ask},
	}
	tests := []struct {
		name     string
		call     scripted.ToolCall
		approver loop.Approver
		want     string
		isError  bool
	}{
		{"deny pattern", call("shell", map[string]any{"command": "rm -rf /tmp/x"}), nil,
			"Tool error (shell): denied by policy: destructive", true},
		{"ask headless is deny", call("shell", map[string]any{"command": "curl http://example.com"}), nil,
			"ask = deny", true},
		{"ask approved", call("write_file", map[string]any{"file_path": "a.txt", "content": "x"}),
			func(context.Context, loop.PolicyRequest, string) (bool, error) { return true, nil }, "a.txt", false},
		{"ask rejected", call("write_file", map[string]any{"file_path": "a.txt", "content": "x"}),
			func(context.Context, loop.PolicyRequest, string) (bool, error) { return false, nil }, "rejected by the user", true},
		{"allowed", call("shell", map[string]any{"command": "echo fine"}), nil, "fine", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := newEnv(t)
			opts := []loop.Option{loop.WithToolPolicy(rules)}
			if tt.approver != nil {
				opts = append(opts, loop.WithApprover(tt.approver))
			}
			s := newSession(t, anthropic(), env, script(tools(tt.call), text("ok")), opts...)
			rec := record(s)
			if err := s.Submit(t.Context(), "go"); err != nil {
				t.Fatal(err)
			}
			r := lastResults(t, s)[0]
			if r.IsError != tt.isError || !strings.Contains(r.Content, tt.want) {
				t.Errorf("result %+v, want isError=%v containing %q", r, tt.isError, tt.want)
			}
			_ = s.Close()
			rec.All(t)
		})
	}
}

// TestCustomToolOverridesProfile: a custom registration replaces the
// profile's tool of the same name and is dispatched through the registry.
func TestCustomToolOverridesProfile(t *testing.T) {
	env, _ := newEnv(t)
	p := profile.OpenAI("gpt-5.2-codex")
	var ran atomic.Bool
	customTool(t, p.Registry(), "shell", `{"type":"object","properties":{"command":{"type":"string"}}}`,
		func(context.Context, *tool.Invocation) (tool.Result, error) {
			ran.Store(true)
			return tool.Result{Output: "custom shell"}, nil
		})
	customTool(t, p.Registry(), "run_tests", `{"type":"object","properties":{"filter":{"type":"string"}}}`,
		func(context.Context, *tool.Invocation) (tool.Result, error) {
			return tool.Result{Output: "tests passed"}, nil
		})
	spy := &spyClient{inner: scripted.New(script(
		tools(call("shell", map[string]any{"command": "ls"}), call("run_tests", map[string]any{"filter": "x"})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "tests passed"}, Text: "ok"},
	), "m")}
	s, err := loop.New(p, env, spy)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(s)
	if err := s.Submit(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rec.All(t)
	mustf(t, ran.Load(), "custom shell did not run")
	var names []string
	for _, d := range spy.requests()[0].Tools {
		names = append(names, d.Name)
	}
	if !slices.Contains(names, "run_tests") || slices.Index(names, "shell") < 0 {
		t.Errorf("request tools %v", names)
	}
	if pt := spy.requests()[0].ParallelToolCalls; pt == nil || !*pt {
		t.Error("the request must carry the profile's parallel tool calls flag")
	}
	if !strings.Contains(spy.requests()[0].Messages[0].Text(), "run_tests") {
		t.Error("system prompt does not describe the custom tool")
	}
}

// WithToolGate: the session starts and calls the model while the gate is
// closed, and no tool runs until it opens; a session stopped before that
// runs none (the runner records the change baseline behind this gate).
func TestToolGate(t *testing.T) {
	probe := func(t *testing.T, p loop.Profile, gate <-chan struct{}, ran *atomic.Int32) {
		customTool(t, p.Registry(), "probe", "", func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
			ran.Add(1)
			select {
			case <-gate:
			default:
				t.Error("the tool ran before the gate opened")
			}
			return tool.Result{Output: "probed"}, nil
		})
	}
	t.Run("the model is called before the gate opens, the tool after", func(t *testing.T) {
		env, _ := newEnv(t)
		p := profile.Gemini("gemini-2.5-pro")
		gate := make(chan struct{})
		var ran atomic.Int32
		probe(t, p, gate, &ran)
		spy := &spyClient{inner: scripted.New(script(tools(call("probe", map[string]any{})), text("done")), p.Model())}
		called := make(chan struct{}, 2)
		s, err := loop.New(p, env, &gatedSpy{spyClient: spy, called: called}, loop.WithToolGate(gate))
		if err != nil {
			t.Fatal(err)
		}
		submitted := make(chan error, 1)
		go func() { submitted <- s.Submit(t.Context(), "probe") }()
		select {
		case <-called: // the first model call, with the gate still closed
		case <-time.After(30 * time.Second):
			t.Fatal("the model was not called while the gate was closed")
		}
		close(gate)
		if err := <-submitted; err != nil {
			t.Fatal(err)
		}
		if ran.Load() != 1 {
			t.Fatalf("the tool ran %d times, want 1", ran.Load())
		}
		_ = s.Close()
	})
	t.Run("a session stopped before the gate opens runs no tool", func(t *testing.T) {
		env, _ := newEnv(t)
		p := profile.Gemini("gemini-2.5-pro")
		gate := make(chan struct{}) // never opens
		var ran atomic.Int32
		probe(t, p, gate, &ran)
		s := newSession(t, p, env, script(tools(call("probe", map[string]any{})), text("done")), loop.WithToolGate(gate))
		rec := record(s)
		ctx, cancel := context.WithCancel(t.Context())
		submitted := make(chan error, 1)
		go func() { submitted <- s.Submit(ctx, "probe") }()
		rec.WaitFor(t, loop.EventAssistantTextEnd) // the turn with the call
		cancel()
		if err := <-submitted; err == nil {
			t.Fatal("Submit of a stopped input returned nil")
		}
		if ran.Load() != 0 {
			t.Fatalf("the tool ran %d times before the gate opened", ran.Load())
		}
		_ = s.Close()
		for _, ev := range ofKind(rec.All(t), loop.EventToolCallEnd) {
			if !ev.Data.IsError || !strings.Contains(ev.Data.Error, "not run") {
				t.Errorf("TOOL_CALL_END = %+v, want the error of a call not run", ev.Data)
			}
		}
	})
}

// gatedSpy signals each model call.
type gatedSpy struct {
	*spyClient
	called chan<- struct{}
}

func (c *gatedSpy) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	c.called <- struct{}{}
	return c.spyClient.Stream(ctx, req)
}

func (c *gatedSpy) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	c.called <- struct{}{}
	return c.spyClient.Complete(ctx, req)
}
