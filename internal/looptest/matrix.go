package looptest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Provider is one column of the validation matrix of seed 000 §9.12.
type Provider struct {
	// Name is the profile id: openai, anthropic or gemini.
	Name string
	// New returns a fresh profile of the provider.
	New func() *profile.Profile
}

// Providers are the three columns of the validation matrix.
var Providers = []Provider{
	{"openai", func() *profile.Profile { return profile.OpenAI("gpt-5.2-codex") }},
	{"anthropic", func() *profile.Profile { return profile.Anthropic("claude-sonnet-4-5") }},
	{"gemini", func() *profile.Profile { return profile.Gemini("gemini-2.5-pro") }},
}

// EditCall is the provider's native edit: apply_patch for OpenAI, edit_file
// (old_string/new_string) for the others.
func EditCall(p string, file, old, replacement string) scripted.ToolCall {
	if p == "openai" {
		patch := "*** Begin Patch\n*** Update File: " + file + "\n@@\n-" + old + "\n+" +
			strings.ReplaceAll(replacement, "\n", "\n+") + "\n*** End Patch\n"
		return Call("apply_patch", map[string]string{"patch": patch})
	}
	return Call("edit_file", map[string]string{"file_path": file, "old_string": old, "new_string": replacement})
}

// foreignEditCall is the other providers' edit tool, which p's profile does
// not offer.
func foreignEditCall(p string, file, old, replacement string) (string, scripted.ToolCall) {
	if p == "openai" {
		return "edit_file", EditCall("anthropic", file, old, replacement)
	}
	return "apply_patch", EditCall("openai", file, old, replacement)
}

// matrix runs the sessions of one test over the client under test.
type matrix struct{ newClient NewClient }

func (m matrix) session(t *testing.T, p loop.Profile, env tool.ExecutionEnvironment, s *scripted.Script, opts ...loop.Option) *loop.Session {
	t.Helper()
	return NewSession(t, m.newClient, p, env, s, opts...)
}

// matrixRun is a finished session with its workspace and events.
type matrixRun struct {
	dir    string
	s      *loop.Session
	events []loop.Event
}

// run submits inputs to a fresh session over a fresh workspace prepared by
// setup, closes it and returns it with its events.
func (m matrix) run(t *testing.T, p loop.Profile, sc *scripted.Script, setup func(dir string), inputs ...string) *matrixRun {
	t.Helper()
	env, dir := NewEnv(t)
	if setup != nil {
		setup(dir)
	}
	s := m.session(t, p, env, sc)
	rec := Record(s)
	for _, in := range inputs {
		if err := s.Submit(t.Context(), in); err != nil {
			t.Fatalf("Submit(%q): %v", in, err)
		}
	}
	_ = s.Close()
	return &matrixRun{dir: dir, s: s, events: rec.All(t)}
}

func (r *matrixRun) file(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type matrixCase struct {
	name string
	run  func(t *testing.T, m matrix, pv Provider)
}

// RunMatrix runs every row of the validation matrix of seed 000 §9.12 for
// every provider, as subtests named <row>/<provider>, with each session's
// client built by newClient.
func RunMatrix(t *testing.T, newClient NewClient) {
	m := matrix{newClient: newClient}
	for _, c := range matrixCases {
		for _, pv := range Providers {
			t.Run(c.name+"/"+pv.Name, func(t *testing.T) { c.run(t, m, pv) })
		}
	}
}

var matrixCases = []matrixCase{
	{"simple file creation", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("write_file", map[string]string{"file_path": "hello.py", "content": "print('Hello World')\n"})),
			Text("Created."),
		), nil, "Create a file called hello.py that prints 'Hello World'")
		if !strings.Contains(r.file(t, "hello.py"), "Hello") {
			t.Error("hello.py lacks Hello")
		}
	}},
	{"read file then edit it", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("read_file", map[string]string{"file_path": "hello.py"})),
			scripted.Turn{Expect: ExpectResult("print('Hello World')"),
				ToolCalls: []scripted.ToolCall{EditCall(pv.Name, "hello.py", "print('Hello World')", "print('Hello World')\nprint('Goodbye')")}},
			Text("Added Goodbye."),
		), func(dir string) { WriteFile(t, dir, "hello.py", "print('Hello World')\n") },
			"Read hello.py and add a second print statement that says 'Goodbye'")
		got := r.file(t, "hello.py")
		if !strings.Contains(got, "Hello") || !strings.Contains(got, "Goodbye") {
			t.Errorf("hello.py = %q", got)
		}
		for _, e := range OfKind(r.events, loop.EventToolCallEnd) {
			if e.Data.IsError {
				t.Errorf("%s failed: %s%s", e.Data.ToolName, e.Data.Output, e.Data.Error)
			}
		}
	}},
	{"multi-file edit in one session", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			// Read first: the Anthropic profile refuses to edit unread files.
			Tools(Call("read_file", map[string]string{"file_path": "a.go"}), Call("read_file", map[string]string{"file_path": "b.go"})),
			Tools(EditCall(pv.Name, "a.go", "const A = 1", "const A = 2")),
			Tools(EditCall(pv.Name, "b.go", "const B = 1", "const B = 2")),
			Text("Both updated."),
		), func(dir string) {
			WriteFile(t, dir, "a.go", "const A = 1\n")
			WriteFile(t, dir, "b.go", "const B = 1\n")
		}, "Bump A and B")
		if r.file(t, "a.go") != "const A = 2\n" || r.file(t, "b.go") != "const B = 2\n" {
			t.Errorf("a.go=%q b.go=%q", r.file(t, "a.go"), r.file(t, "b.go"))
		}
	}},
	{"shell command execution", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("shell", map[string]string{"command": "cat hello.txt"})),
			scripted.Turn{Expect: ExpectResult("Hello World"), Text: "It prints Hello World."},
		), func(dir string) { WriteFile(t, dir, "hello.txt", "Hello World\n") }, "Run it and show the output")
		if len(OfKind(r.events, loop.EventToolCallOutputDelta)) == 0 {
			t.Error("no TOOL_CALL_OUTPUT_DELTA for the shell command")
		}
	}},
	{"shell command timeout handling", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("shell", map[string]any{"command": "sleep 30", "timeout_ms": 200})),
			scripted.Turn{Expect: ExpectResult("Command timed out after 200ms"), Text: "It timed out; I will use a longer timeout."},
		), nil, "Run 'sleep 30'")
		if res := LastResults(t, r.s)[0]; !res.IsError {
			t.Error("a timed-out command must be an error result")
		}
	}},
	{"grep and glob to find files", func(t *testing.T, m matrix, pv Provider) {
		m.run(t, pv.New(), Script(
			Tools(Call("glob", map[string]string{"pattern": "**/*.py"})),
			scripted.Turn{Expect: ExpectResult("pkg/util.py"), ToolCalls: []scripted.ToolCall{Call("grep", map[string]string{"pattern": "def helper"})}},
			scripted.Turn{Expect: ExpectResult("util.py"), Text: "helper is in pkg/util.py"},
		), func(dir string) {
			_ = os.MkdirAll(filepath.Join(dir, "pkg"), 0o755)
			WriteFile(t, dir, "pkg/util.py", "def helper():\n    pass\n")
			WriteFile(t, dir, "main.py", "print(1)\n")
		}, "Where is helper defined?")
	}},
	{"multi-step task read analyze edit", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("grep", map[string]string{"pattern": "TODO"})),
			scripted.Turn{Expect: ExpectResult("calc.py"), ToolCalls: []scripted.ToolCall{Call("read_file", map[string]string{"file_path": "calc.py"})}},
			scripted.Turn{Expect: ExpectResult("return a - b"), ToolCalls: []scripted.ToolCall{EditCall(pv.Name, "calc.py", "    return a - b  # TODO", "    return a + b")}},
			scripted.Turn{Expect: ExpectResult("calc.py"), ToolCalls: []scripted.ToolCall{Call("shell", map[string]string{"command": "grep -c 'a + b' calc.py"})}},
			scripted.Turn{Expect: ExpectResult("1"), Text: "Fixed add()."},
		), func(dir string) { WriteFile(t, dir, "calc.py", "def add(a, b):\n    return a - b  # TODO\n") }, "Fix the TODO")
		if !strings.Contains(r.file(t, "calc.py"), "return a + b") {
			t.Errorf("calc.py = %q", r.file(t, "calc.py"))
		}
	}},
	{"tool output truncation large file", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("read_file", map[string]string{"file_path": "big.txt"})),
			scripted.Turn{Expect: ExpectResult("[WARNING: Tool output was truncated."), Text: "It is all x."},
		), func(dir string) { WriteFile(t, dir, "big.txt", strings.Repeat("x", 100_000)) }, "Read big.txt")
		end := OfKind(r.events, loop.EventToolCallEnd)[0]
		if strings.Count(end.Data.Output, "x") != 100_000 {
			t.Errorf("TOOL_CALL_END has %d x, want the full 100,000", strings.Count(end.Data.Output, "x"))
		}
	}},
	{"parallel tool calls", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("read_file", map[string]string{"file_path": "a.txt"}), Call("read_file", map[string]string{"file_path": "b.txt"})),
			Text("Read both."),
		), func(dir string) {
			WriteFile(t, dir, "a.txt", "alpha\n")
			WriteFile(t, dir, "b.txt", "beta\n")
		}, "Read a.txt and b.txt")
		res := LastResults(t, r.s)
		if len(res) != 2 || !strings.Contains(res[0].Content, "alpha") || !strings.Contains(res[1].Content, "beta") {
			t.Errorf("results %+v", res)
		}
	}},
	{"steering mid-task", func(t *testing.T, m matrix, pv Provider) {
		p := pv.New()
		var s *loop.Session
		CustomTool(t, p.Registry(), "plan", "", func(context.Context, *tool.Invocation) (tool.Result, error) {
			s.Steer("Actually, just create a single /health endpoint for now")
			return tool.Result{Output: "planned routes /, /users, /admin"}, nil
		})
		env, _ := NewEnv(t)
		s = m.session(t, p, env, Script(
			Tools(Call("plan", map[string]any{})),
			scripted.Turn{Expect: &scripted.Expect{LastUserContains: "single /health endpoint"}, Text: "OK, only /health."},
		))
		rec := Record(s)
		if err := s.Submit(t.Context(), "Create a Flask web application with multiple routes"); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if len(OfKind(rec.All(t), loop.EventSteeringInjected)) != 1 {
			t.Error("no STEERING_INJECTED")
		}
	}},
	{"reasoning effort change", func(t *testing.T, m matrix, pv Provider) {
		env, _ := NewEnv(t)
		high, low := "high", "low"
		s := m.session(t, pv.New(), env, Script(
			scripted.Turn{Expect: &scripted.Expect{ReasoningEffort: &high}, Text: "thought hard"},
			scripted.Turn{Expect: &scripted.Expect{ReasoningEffort: &low}, Text: "thought less"},
		))
		rec := Record(s)
		s.SetReasoningEffort("high")
		if err := s.Submit(t.Context(), "one"); err != nil {
			t.Fatal(err)
		}
		s.SetReasoningEffort("low")
		if err := s.Submit(t.Context(), "two"); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		rec.All(t)
	}},
	{"subagent spawn and wait", func(t *testing.T, m matrix, pv Provider) {
		sc := Script(
			Tools(Call("spawn_agent", map[string]any{"task": "write tests for hello.py"})),
			Tools(Call("wait", map[string]any{"agent_id": "main-agent-1"})),
			scripted.Turn{Expect: ExpectResult("Tests written."), Text: "Reviewed."},
		)
		sc.Agents = []scripted.Agent{{Match: "write tests", Turns: []scripted.Turn{
			Tools(Call("write_file", map[string]string{"file_path": "test_hello.py", "content": "def test_hello(): pass\n"})),
			Text("Tests written."),
		}}}
		env, dir := NewEnv(t)
		s := m.session(t, pv.New(), env, sc, loop.WithID("main"))
		rec := Record(s)
		if err := s.Submit(t.Context(), "Delegate tests for hello.py, then review"); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		rec.All(t)
		if _, err := os.Stat(filepath.Join(dir, "test_hello.py")); err != nil {
			t.Error(err)
		}
	}},
	{"loop detection triggers warning", func(t *testing.T, m matrix, pv Provider) {
		var turns []scripted.Turn
		for range 10 {
			turns = append(turns, Tools(Call("glob", map[string]string{"pattern": "*.md"})))
		}
		turns = append(turns, scripted.Turn{Expect: &scripted.Expect{LastUserContains: "Loop detected"}, Text: "Changing approach."})
		r := m.run(t, pv.New(), Script(turns...), nil, "find docs")
		if len(OfKind(r.events, loop.EventLoopDetection)) != 1 {
			t.Error("no LOOP_DETECTION")
		}
	}},
	{"error recovery tool fails model retries", func(t *testing.T, m matrix, pv Provider) {
		r := m.run(t, pv.New(), Script(
			Tools(Call("read_file", map[string]string{"file_path": "confg.yaml"})),
			scripted.Turn{Expect: ExpectResult("confg.yaml"), ToolCalls: []scripted.ToolCall{Call("glob", map[string]string{"pattern": "*.yaml"})}},
			scripted.Turn{Expect: ExpectResult("config.yaml"), ToolCalls: []scripted.ToolCall{Call("read_file", map[string]string{"file_path": "config.yaml"})}},
			scripted.Turn{Expect: ExpectResult("port: 80"), Text: "The port is 80."},
		), func(dir string) { WriteFile(t, dir, "config.yaml", "port: 80\n") }, "What port is configured?")
		ends := OfKind(r.events, loop.EventToolCallEnd)
		if !ends[0].Data.IsError || ends[2].Data.IsError {
			t.Errorf("want the first read to fail and the retry to succeed: %+v", ends)
		}
	}},
	// The provider's own edit format works and the other providers' does
	// not exist for it: apply_patch for openai, edit_file otherwise.
	{"provider-specific editing format works", func(t *testing.T, m matrix, pv Provider) {
		foreign, wrong := foreignEditCall(pv.Name, "greet.py", "print('hi')", "print('hello')")
		r := m.run(t, pv.New(), Script(
			Tools(Call("read_file", map[string]string{"file_path": "greet.py"})),
			Tools(wrong),
			scripted.Turn{Expect: ExpectResult("Unknown tool: " + foreign),
				ToolCalls: []scripted.ToolCall{EditCall(pv.Name, "greet.py", "print('hi')", "print('hello')")}},
			Text("Edited with the native format."),
		), func(dir string) { WriteFile(t, dir, "greet.py", "print('hi')\n") }, "Change the greeting to hello")
		if got := r.file(t, "greet.py"); got != "print('hello')\n" {
			t.Errorf("greet.py = %q, want print('hello')", got)
		}
		ends := OfKind(r.events, loop.EventToolCallEnd)[1:] // after the read
		if len(ends) != 2 || !ends[0].Data.IsError || ends[1].Data.IsError {
			t.Fatalf("want %s rejected and the native edit to succeed: %+v", foreign, ends)
		}
		if native := EditCall(pv.Name, "", "", "").Name; ends[1].Data.ToolName != native {
			t.Errorf("edited with %s, want %s", ends[1].Data.ToolName, native)
		}
	}},
}
