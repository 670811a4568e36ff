package loop_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func extraTool(name, schema, out string) tool.Registered {
	return tool.Registered{
		Definition: tool.Definition{Name: name, Description: "an extra tool", Parameters: json.RawMessage(schema)},
		Executor: func(context.Context, *tool.Invocation) (tool.Result, error) {
			return tool.Result{Output: out}, nil
		},
	}
}

// TestWithExtraTools: extra tools are offered to the model and run through
// the pipeline (validation included); a profile tool of the same name wins.
func TestWithExtraTools(t *testing.T) {
	p := anthropic()
	env, _ := newEnv(t)
	s := script(
		tools(call("mcp__demo__echo", map[string]string{"text": "hi"})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "from extra"},
			ToolCalls: []scripted.ToolCall{call("mcp__demo__echo", map[string]int{"text": 1})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "invalid arguments"},
			ToolCalls: []scripted.ToolCall{call("read_file", map[string]string{"file_path": "missing.txt"})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "missing.txt"}, Text: "done"},
	)
	spy := &spyClient{inner: scriptedClient(t, p, s)}
	sess, err := loop.New(p, env, spy, loop.WithExtraTools(
		extraTool("mcp__demo__echo", `{"type":"object","properties":{"text":{"type":"string"}}}`, "from extra"),
		extraTool("read_file", `{"type":"object"}`, "the extra read_file ran"),
	))
	if err != nil {
		t.Fatal(err)
	}
	rec := record(sess)
	if err := sess.Submit(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	_ = sess.Close()
	rec.All(t)
	reqs := spy.requests()
	var offered []string
	for _, d := range reqs[0].Tools {
		offered = append(offered, d.Name)
	}
	if !slices.Contains(offered, "mcp__demo__echo") {
		t.Fatalf("tools offered = %v, want mcp__demo__echo among them", offered)
	}
	if n := strings.Count(strings.Join(offered, " "), "read_file"); n != 1 {
		t.Fatalf("read_file offered %d times: %v", n, offered)
	}
}

// TestWithExtraToolsBadSchema: a tool whose parameters are not an object
// schema is refused when the session is created.
func TestWithExtraToolsBadSchema(t *testing.T) {
	env, _ := newEnv(t)
	_, err := loop.New(anthropic(), env, scriptedClient(t, anthropic(), script(text("x"))),
		loop.WithExtraTools(extraTool("mcp__demo__bad", `{"type":"string"}`, "")))
	if err == nil || !strings.Contains(err.Error(), "mcp__demo__bad") {
		t.Fatalf("err = %v, want one naming the tool", err)
	}
}
