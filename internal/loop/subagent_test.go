package loop_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/builtin"
)

// TestSubagentSpawnAndWait: the child shares the filesystem, keeps its own
// history, cannot spawn further (depth 1), and its result comes back as the
// wait tool's result.
func TestSubagentSpawnAndWait(t *testing.T) {
	env, dir := newEnv(t)
	sc := script(
		tools(call("spawn_agent", map[string]any{"task": "write tests for hello.py"})),
		tools(call("wait", map[string]any{"agent_id": "parent-agent-1"})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "Tests written."}, Text: "Reviewed the tests."},
	)
	sc.Agents = []scripted.Agent{{Match: "write tests", Turns: []scripted.Turn{
		tools(call("spawn_agent", map[string]any{"task": "nested"})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: builtin.NoSubagentsMessage},
			ToolCalls: []scripted.ToolCall{call("write_file", map[string]any{"file_path": "test_hello.py", "content": "def test(): pass\n"})}},
		text("Tests written."),
	}}}
	s := newSession(t, anthropic(), env, sc, loop.WithID("parent"))
	rec := record(s)
	if err := s.Submit(t.Context(), "Delegate the tests of hello.py to a subagent, then review its output"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "test_hello.py")); err != nil {
		t.Errorf("the subagent's file is not in the shared workspace: %v", err)
	}
	res := lastResults(t, s)[0]
	if res.IsError || !strings.Contains(res.Content, `"success":true`) || !strings.Contains(res.Content, `"turns_used":3`) {
		t.Errorf("wait result %+v", res)
	}
	for _, turn := range s.History() {
		if a, ok := turn.(*loop.AssistantTurn); ok {
			for _, c := range a.ToolCalls {
				if c.Name == "write_file" {
					t.Error("the child's tool call leaked into the parent's history")
				}
			}
		}
	}
	_ = s.Close()
	evs := rec.All(t)
	var names []string
	for _, e := range ofKind(evs, loop.EventToolCallStart) {
		names = append(names, e.Data.ToolName)
	}
	if strings.Join(names, ",") != "spawn_agent,wait" {
		t.Errorf("parent tool calls %v", names)
	}
}

// TestSubagentSendInputAndClose covers send_input on a finished child (a new
// input), a second wait, close_agent, and use after close.
func TestSubagentSendInputAndClose(t *testing.T) {
	env, _ := newEnv(t)
	sc := script(
		tools(call("spawn_agent", map[string]any{"task": "count things", "max_turns": 5})),
		tools(call("wait", map[string]any{"agent_id": "p-agent-1"})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "Counted 3."},
			ToolCalls: []scripted.ToolCall{call("send_input", map[string]any{"agent_id": "p-agent-1", "message": "count again"})}},
		tools(call("wait", map[string]any{"agent_id": "p-agent-1"})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "Counted 4."},
			ToolCalls: []scripted.ToolCall{call("close_agent", map[string]any{"agent_id": "p-agent-1"})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: `"status":"completed"`},
			ToolCalls: []scripted.ToolCall{call("send_input", map[string]any{"agent_id": "p-agent-1", "message": "more"})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "closed"}, Text: "All done."},
	)
	sc.Agents = []scripted.Agent{{Match: "count things", Turns: []scripted.Turn{
		scripted.Turn{Expect: &scripted.Expect{LastUserContains: "count things"}, Text: "Counted 3."},
		scripted.Turn{Expect: &scripted.Expect{LastUserContains: "count again"}, Text: "Counted 4."},
	}}}
	s := newSession(t, anthropic(), env, sc, loop.WithID("p"))
	rec := record(s)
	if err := s.Submit(t.Context(), "delegate"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rec.All(t)
	if r := lastResults(t, s)[0]; !r.IsError {
		t.Errorf("send_input after close_agent = %+v, want an error result", r)
	}
}

// TestSubagentsClosedWithParent: closing the parent closes a running child.
func TestSubagentsClosedWithParent(t *testing.T) {
	env, dir := newEnv(t)
	sc := script(
		tools(call("spawn_agent", map[string]any{"task": "long job"})),
		text("spawned"),
	)
	sc.Agents = []scripted.Agent{{Match: "long job", Turns: []scripted.Turn{
		tools(call("shell", map[string]any{"command": "echo $$ > child.pid; exec sleep 30", "timeout_ms": 60000})),
		text("never"),
	}}}
	s := newSession(t, anthropic(), env, sc)
	rec := record(s)
	if err := s.Submit(t.Context(), "start it"); err != nil {
		t.Fatal(err)
	}
	pid := waitPidFile(t, filepath.Join(dir, "child.pid"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rec.All(t)
	if processAlive(pid) {
		t.Errorf("the subagent's command %d survived the parent's Close", pid)
	}
}
