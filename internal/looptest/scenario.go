package looptest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// The inputs of the end-to-end scenario of seed 000 §9.13, one per step.
const (
	scenarioCreate   = "Create a file called hello.py that prints 'Hello World'"
	scenarioEdit     = "Read hello.py and add a second print statement that says 'Goodbye'"
	scenarioRun      = "Run hello.py and show the output"
	scenarioBig      = "Read big.txt"
	scenarioFlask    = "Create a Flask web application with multiple routes"
	scenarioSteer    = "Actually, just create a single /health endpoint for now"
	scenarioSubagent = "Spawn a subagent to write tests for hello.py, then review its output"
	scenarioTimeout  = "Run 'sleep 30' with the default timeout"

	// scenarioTask is the subagent's task; its script matches on it.
	scenarioTask = "Write tests for hello.py and run them"
)

const (
	helloPy    = "print('Hello World')\n"
	healthApp  = "from flask import Flask\n\napp = Flask(__name__)\n\n\n@app.route('/health')\ndef health():\n    return {'status': 'ok'}\n"
	testHelloP = "import subprocess\nimport sys\n\n\ndef test_hello():\n" +
		"    out = subprocess.run([sys.executable, 'hello.py'], capture_output=True, text=True, check=True).stdout\n" +
		"    assert 'Hello World' in out and 'Goodbye' in out\n\n\n" +
		"if __name__ == '__main__':\n    test_hello()\n    print('1 passed')\n"
)

// expectUser expects the last user message to contain s.
func expectUser(s string) *scripted.Expect { return &scripted.Expect{LastUserContains: s} }

// scenarioScript is the model's side of the §9.13 scenario for provider p:
// every turn that follows a tool round or an input checks that the request
// carries what the model must have seen.
func scenarioScript(p string) *scripted.Script {
	sc := Script(
		// 1. Simple file creation.
		scripted.Turn{Expect: expectUser(scenarioCreate), ToolCalls: []scripted.ToolCall{
			Call("write_file", map[string]string{"file_path": "hello.py", "content": helloPy})}},
		scripted.Turn{Expect: ExpectResult("hello.py"), Text: "Created hello.py."},
		// 2. Read and edit with the provider's native edit format.
		scripted.Turn{Expect: expectUser(scenarioEdit), ToolCalls: []scripted.ToolCall{
			Call("read_file", map[string]string{"file_path": "hello.py"})}},
		scripted.Turn{Expect: ExpectResult("print('Hello World')"), ToolCalls: []scripted.ToolCall{
			EditCall(p, "hello.py", "print('Hello World')", "print('Hello World')\nprint('Goodbye')")}},
		Text("Added the Goodbye print."),
		// 3. Shell execution.
		scripted.Turn{Expect: expectUser(scenarioRun), ToolCalls: []scripted.ToolCall{
			Call("shell", map[string]string{"command": "python3 hello.py"})}},
		scripted.Turn{Expect: ExpectResult("Hello World\nGoodbye"), Text: "It prints Hello World, then Goodbye."},
		// 4. Truncation: the model sees the marker, not 100k characters.
		scripted.Turn{Expect: expectUser(scenarioBig), ToolCalls: []scripted.ToolCall{
			Call("read_file", map[string]string{"file_path": "big.txt"})}},
		scripted.Turn{Expect: ExpectResult("[WARNING: Tool output was truncated."), Text: "big.txt is one long run of x."},
		// 5. Steering: the test steers while the first tool call runs; the
		// next request carries it and the model builds only /health.
		scripted.Turn{Expect: expectUser(scenarioFlask), ToolCalls: []scripted.ToolCall{
			Call("glob", map[string]string{"pattern": "*.py"})}},
		scripted.Turn{Expect: expectUser(scenarioSteer), ToolCalls: []scripted.ToolCall{
			Call("write_file", map[string]string{"file_path": "app.py", "content": healthApp})}},
		scripted.Turn{Expect: ExpectResult("app.py"), Text: "Created app.py with a single /health endpoint."},
		// 6. Subagent: spawn, wait, review its work.
		scripted.Turn{Expect: expectUser(scenarioSubagent), ToolCalls: []scripted.ToolCall{
			Call("spawn_agent", map[string]any{"task": scenarioTask})}},
		scripted.Turn{Expect: ExpectResult("main-agent-1"), ToolCalls: []scripted.ToolCall{
			Call("wait", map[string]any{"agent_id": "main-agent-1"})}},
		scripted.Turn{Expect: ExpectResult("test_hello.py passes"), ToolCalls: []scripted.ToolCall{
			Call("read_file", map[string]string{"file_path": "test_hello.py"})}},
		scripted.Turn{Expect: ExpectResult("def test_hello"), Text: "Reviewed: the test runs hello.py and checks both lines."},
		// 7. Timeout with the default timeout.
		scripted.Turn{Expect: expectUser(scenarioTimeout), ToolCalls: []scripted.ToolCall{
			Call("shell", map[string]string{"command": "sleep 30"})}},
		scripted.Turn{Expect: ExpectResult("Command timed out after 10000ms"),
			Text: "sleep 30 timed out after 10 s, as expected with the default timeout; pass timeout_ms to let it finish."},
	)
	sc.Agents = []scripted.Agent{{Match: scenarioTask, Turns: []scripted.Turn{
		Tools(Call("read_file", map[string]string{"file_path": "hello.py"})),
		scripted.Turn{Expect: ExpectResult("Goodbye"), ToolCalls: []scripted.ToolCall{
			Call("write_file", map[string]string{"file_path": "test_hello.py", "content": testHelloP})}},
		scripted.Turn{Expect: ExpectResult("test_hello.py"), ToolCalls: []scripted.ToolCall{
			Call("shell", map[string]string{"command": "python3 test_hello.py"})}},
		scripted.Turn{Expect: ExpectResult("1 passed"), Text: "Wrote test_hello.py; test_hello.py passes."},
	}}}
	return sc
}

// steerOnGlob is a tool policy that steers s once, when the glob call of
// step 5 is about to run: the steering message is queued while the tool
// round is in progress, as a user typing mid-task would.
func steerOnGlob(s **loop.Session) loop.ToolPolicy {
	var once sync.Once
	return loop.PolicyFunc(func(_ context.Context, req loop.PolicyRequest) loop.Verdict {
		if req.ToolName == "glob" && (*s).ID() == req.SessionID {
			once.Do(func() { (*s).Steer(scenarioSteer) })
		}
		return loop.Verdict{Decision: loop.Allow}
	})
}

// RunScenario runs the end-to-end scenario of seed 000 §9.13 for every
// provider, as parallel subtests named by provider: one session over a
// LocalExecutionEnvironment in a temporary directory, with each session's
// client built by newClient, submitting the seven steps in order and
// asserting on the workspace and the event stream.
func RunScenario(t *testing.T, newClient NewClient) {
	for _, pv := range Providers {
		t.Run(pv.Name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, newClient, pv)
		})
	}
}

func runScenario(t *testing.T, newClient NewClient, pv Provider) {
	p := pv.New()
	cfg := loop.DefaultConfig()
	if p.Capabilities().DefaultCommandTimeout != loop.DefaultCommandTimeout {
		// The anthropic profile's shell default is 120 s; the scenario
		// expects the 10 s SessionConfig default of §2.2.
		cfg.DefaultCommandTimeout = loop.DefaultCommandTimeout
	}
	env, dir := NewEnv(t)
	var s *loop.Session
	s = NewSession(t, newClient, p, env, scenarioScript(pv.Name),
		loop.WithID("main"), loop.WithConfig(cfg), loop.WithToolPolicy(steerOnGlob(&s)))
	rec := Record(s)
	run := &matrixRun{dir: dir, s: s}

	submit := func(in string) {
		t.Helper()
		if err := s.Submit(t.Context(), in); err != nil {
			t.Fatalf("Submit(%q): %v", in, err)
		}
	}
	submit(scenarioCreate)
	if !strings.Contains(run.file(t, "hello.py"), "Hello") {
		t.Errorf("step 1: hello.py = %q, want Hello", run.file(t, "hello.py"))
	}
	submit(scenarioEdit)
	if got := run.file(t, "hello.py"); !strings.Contains(got, "Hello") || !strings.Contains(got, "Goodbye") {
		t.Errorf("step 2: hello.py = %q, want Hello and Goodbye", got)
	}
	submit(scenarioRun)
	WriteFile(t, dir, "big.txt", strings.Repeat("x", 100_000))
	submit(scenarioBig)
	submit(scenarioFlask)
	if got := run.file(t, "app.py"); strings.Count(got, "@app.route") != 1 || !strings.Contains(got, "'/health'") {
		t.Errorf("step 5: app.py = %q, want a single /health route", got)
	}
	submit(scenarioSubagent)
	if got := run.file(t, "test_hello.py"); !strings.Contains(got, "def test_hello") {
		t.Errorf("step 6: test_hello.py = %q", got)
	}
	submit(scenarioTimeout)
	_ = s.Close()

	steps := splitSteps(t, rec.All(t), 7)
	checkScenarioEvents(t, pv.Name, steps)
}

// splitSteps splits a session's events at its USER_INPUT events.
func splitSteps(t *testing.T, evs []loop.Event, n int) [][]loop.Event {
	t.Helper()
	var steps [][]loop.Event
	for _, e := range evs {
		if e.Kind == loop.EventUserInput {
			steps = append(steps, nil)
		}
		if len(steps) > 0 {
			steps[len(steps)-1] = append(steps[len(steps)-1], e)
		}
	}
	if len(steps) != n {
		t.Fatalf("%d USER_INPUT events, want %d", len(steps), n)
	}
	return steps
}

// toolEnds returns the TOOL_CALL_END events of evs by tool name, failing on
// any tool error other than allowed.
func toolEnds(t *testing.T, step int, evs []loop.Event, allowed string) []loop.Event {
	t.Helper()
	ends := OfKind(evs, loop.EventToolCallEnd)
	for _, e := range ends {
		if e.Data.IsError && e.Data.ToolName != allowed {
			t.Errorf("step %d: %s failed: %s%s", step, e.Data.ToolName, e.Data.Output, e.Data.Error)
		}
	}
	return ends
}

func names(evs []loop.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Data.ToolName)
	}
	return out
}

func checkScenarioEvents(t *testing.T, provider string, steps [][]loop.Event) {
	t.Helper()
	edit := EditCall(provider, "", "", "").Name
	wantTools := [][]string{
		{"write_file"},
		{"read_file", edit},
		{"shell"},
		{"read_file"},
		{"glob", "write_file"},
		{"spawn_agent", "wait", "read_file"},
		{"shell"},
	}
	for i, evs := range steps {
		allowed := ""
		if i == 6 {
			allowed = "shell" // the timed-out command is an error result
		}
		ends := toolEnds(t, i+1, evs, allowed)
		if got := names(ends); strings.Join(got, ",") != strings.Join(wantTools[i], ",") {
			t.Errorf("step %d: tool calls %v, want %v", i+1, got, wantTools[i])
		}
		if got := names(OfKind(evs, loop.EventToolCallStart)); strings.Join(got, ",") != strings.Join(wantTools[i], ",") {
			t.Errorf("step %d: TOOL_CALL_START for %v, want %v", i+1, got, wantTools[i])
		}
	}

	// 3. The shell call ran hello.py and streamed its output.
	if start := OfKind(steps[2], loop.EventToolCallStart); len(start) == 1 &&
		!strings.Contains(string(start[0].Data.Arguments), "hello.py") {
		t.Errorf("step 3: shell arguments %s, want python3 hello.py", start[0].Data.Arguments)
	}
	if ends := OfKind(steps[2], loop.EventToolCallEnd); len(ends) == 1 && !strings.Contains(ends[0].Data.Output, "Hello World\nGoodbye") {
		t.Errorf("step 3: shell output %q", ends[0].Data.Output)
	}
	if len(OfKind(steps[2], loop.EventToolCallOutputDelta)) == 0 {
		t.Error("step 3: no TOOL_CALL_OUTPUT_DELTA for the shell command")
	}

	// 4. TOOL_CALL_END has the full output (the truncated result the model
	// got is checked by the script's expectation on the next request).
	if ends := OfKind(steps[3], loop.EventToolCallEnd); len(ends) == 1 {
		if n := strings.Count(ends[0].Data.Output, "x"); n != 100_000 {
			t.Errorf("step 4: TOOL_CALL_END has %d x, want the full 100,000", n)
		}
		if strings.Contains(ends[0].Data.Output, "truncated") {
			t.Error("step 4: TOOL_CALL_END output is truncated")
		}
	}

	// 5. The steering message is injected after the first tool round and
	// before the model's adjusted write.
	var steered, wroteAfter bool
	for _, e := range steps[4] {
		switch {
		case e.Kind == loop.EventSteeringInjected && e.Data.Content == scenarioSteer:
			steered = true
		case e.Kind == loop.EventToolCallStart && e.Data.ToolName == "write_file":
			wroteAfter = steered
		}
	}
	if !steered || !wroteAfter {
		t.Errorf("step 5: STEERING_INJECTED %v, app.py written after it %v", steered, wroteAfter)
	}

	// 6. The subagent tools appear in the stream, and wait returned the
	// subagent's own answer.
	if ends := OfKind(steps[5], loop.EventToolCallEnd); len(ends) == 3 {
		if !strings.Contains(ends[0].Data.Output, "main-agent-1") {
			t.Errorf("step 6: spawn_agent output %q", ends[0].Data.Output)
		}
		if !strings.Contains(ends[1].Data.Output, "test_hello.py passes") {
			t.Errorf("step 6: wait output %q", ends[1].Data.Output)
		}
	}

	// 7. The command ran into the 10 s default (not the 30 s of sleep), the
	// model got the timeout message and the session ended normally.
	if ends := OfKind(steps[6], loop.EventToolCallEnd); len(ends) == 1 {
		e := ends[0]
		if !e.Data.IsError || !strings.Contains(e.Data.Output, "Command timed out after 10000ms") {
			t.Errorf("step 7: result %q (error %v), want the timeout message", e.Data.Output, e.Data.IsError)
		}
		if e.Data.DurationMs < 10_000 { // a timeout never fires early; the message above proves it fired
			t.Errorf("step 7: the command ran %d ms, want the 10 s default timeout", e.Data.DurationMs)
		}
	}
	if end := OfKind(steps[6], loop.EventSessionEnd); len(end) == 0 || end[0].Data.State != string(loop.StateIdle) ||
		end[0].Data.Error != "" || !strings.Contains(end[0].Data.Text, "timed out") {
		t.Errorf("step 7: SESSION_END %+v, want IDLE with the model's answer about the timeout", end)
	}
}
