package loop_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// changingSource is a host's tool source whose tools a test changes; the
// change shows at the next Refresh, as an MCP server's after its
// notification.
type changingSource struct {
	mu      sync.Mutex
	tools   []tool.Registered
	pending []tool.Registered // set by change, returned by the next Refresh
	changed bool
	err     error // the next Refresh fails with it
	calls   int
}

func (c *changingSource) Tools() []tool.Registered {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tools)
}

func (c *changingSource) Refresh(context.Context) ([]tool.Registered, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if err := c.err; err != nil {
		c.err = nil
		return slices.Clone(c.tools), false, err
	}
	if !c.changed {
		return slices.Clone(c.tools), false, nil
	}
	c.tools, c.changed = c.pending, false
	return slices.Clone(c.tools), true, nil
}

func (c *changingSource) change(tools ...tool.Registered) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending, c.changed = tools, true
}

func (c *changingSource) refreshes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

const objSchema = `{"type":"object","properties":{"text":{"type":"string"}}}`

// TestExtraToolSourceChangesBetweenTurns: a source's change made during a
// tool round shows in the next model request (new tool offered and
// callable, removed tool gone); a call to the removed tool gets an error
// result saying so; a WARNING event says what changed; a refresh that
// fails keeps the tools and says so; a new tool the registry refuses is
// left out and named.
func TestExtraToolSourceChangesBetweenTurns(t *testing.T) {
	src := &changingSource{}
	b := extraTool("src_b", objSchema, "b ran")
	c := extraTool("src_c", objSchema, "c ran")
	bad := extraTool("src_bad", `{"type":"string"}`, "")
	a := tool.Registered{Definition: tool.Definition{Name: "src_a", Description: "changes the source", Parameters: []byte(objSchema)},
		Executor: func(context.Context, *tool.Invocation) (tool.Result, error) {
			src.change(b, c, bad) // a goes, c comes, bad is refused
			return tool.Result{Output: "a ran"}, nil
		}}
	fails := tool.Registered{Definition: tool.Definition{Name: "src_fail", Description: "makes the next refresh fail", Parameters: []byte(objSchema)},
		Executor: func(context.Context, *tool.Invocation) (tool.Result, error) {
			src.mu.Lock()
			src.err = errors.New("server went away")
			src.mu.Unlock()
			return tool.Result{Output: "armed"}, nil
		}}
	src.tools = []tool.Registered{a, b}

	p := anthropic()
	env, _ := newEnv(t)
	s := script(
		tools(call("src_a", map[string]string{})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "a ran"},
			ToolCalls: []scripted.ToolCall{call("src_c", map[string]string{"text": "x"}), call("src_a", map[string]string{})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "no longer available"},
			ToolCalls: []scripted.ToolCall{call("extra_fail", map[string]string{})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "armed"}, Text: "done"},
	)
	spy := &spyClient{inner: scriptedClient(t, p, s)}
	sess, err := loop.New(p, env, spy, loop.WithExtraToolSource("source S", src),
		loop.WithExtraTools(tool.Registered{Definition: tool.Definition{Name: "extra_fail", Parameters: []byte(objSchema)},
			Executor: fails.Executor}))
	if err != nil {
		t.Fatal(err)
	}
	evs := submitAndClose(t, sess, "go")

	reqs := spy.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4", len(reqs))
	}
	first, second := toolNames(reqs[0]), toolNames(reqs[1])
	if !slices.Contains(first, "src_a") || slices.Contains(first, "src_c") {
		t.Errorf("first request's tools = %v, want src_a and no src_c", first)
	}
	if slices.Contains(second, "src_a") || !slices.Contains(second, "src_c") || slices.Contains(second, "src_bad") ||
		!slices.Contains(second, "src_b") {
		t.Errorf("second request's tools = %v, want src_b and src_c, neither src_a nor src_bad", second)
	}
	if got := toolNames(reqs[3]); !slices.Equal(got, second) {
		t.Errorf("tools after a failed refresh = %v, want them unchanged: %v", got, second)
	}
	if n := src.refreshes(); n != len(reqs) {
		t.Errorf("%d refreshes for %d model requests, want one per request", n, len(reqs))
	}

	ends := ofKind(evs, loop.EventToolCallEnd)
	if len(ends) != 4 {
		t.Fatalf("%d tool call ends, want 4", len(ends))
	}
	byName := map[string]loop.EventData{} // the round's two calls end in any order
	for _, e := range ends[1:3] {
		byName[e.Data.ToolName] = e.Data
	}
	if got := byName["src_c"]; got.Output != "c ran" || got.IsError {
		t.Errorf("the new tool's call = %+v, want its output", got)
	}
	if got := byName["src_a"]; !got.IsError || !strings.Contains(got.Error, "src_a") ||
		!strings.Contains(got.Error, "source S stopped offering it") {
		t.Errorf("the removed tool's call = %+v, want an error naming the tool and the source", got)
	}

	var warnings []string
	for _, e := range ofKind(evs, loop.EventWarning) {
		warnings = append(warnings, e.Data.Message)
	}
	if len(warnings) != 2 {
		t.Fatalf("warnings = %q, want the change and the failed refresh", warnings)
	}
	for _, want := range []string{"source S now offers 2 tools (+src_c, -src_a)", "left out: src_bad", "root"} {
		if !strings.Contains(warnings[0], want) {
			t.Errorf("change warning %q does not say %q", warnings[0], want)
		}
	}
	for _, want := range []string{"source S", "the 2 tools it offered stay", "server went away"} {
		if !strings.Contains(warnings[1], want) {
			t.Errorf("refresh warning %q does not say %q", warnings[1], want)
		}
	}
}

// TestExtraToolSourceNameClash: a source may not take the name of another
// tool of the session.
func TestExtraToolSourceNameClash(t *testing.T) {
	src := &changingSource{tools: []tool.Registered{extraTool("src_a", objSchema, "a")}}
	src.change(extraTool("src_a", objSchema, "a"), extraTool("todo", objSchema, "not the todo tool"), extraTool("other", objSchema, "x"))
	p := anthropic()
	env, _ := newEnv(t)
	spy := &spyClient{inner: scriptedClient(t, p, script(text("done")))}
	sess, err := loop.New(p, env, spy, loop.WithExtraToolSource("S", src),
		loop.WithExtraTools(extraTool("other", objSchema, "the static one")))
	if err != nil {
		t.Fatal(err)
	}
	w := ofKind(submitAndClose(t, sess, "go"), loop.EventWarning)
	if len(w) != 1 || !strings.Contains(w[0].Data.Message, "S now offers 1 tools") ||
		!strings.Contains(w[0].Data.Message, "todo (another tool of the session has this name)") ||
		!strings.Contains(w[0].Data.Message, "other (another tool of the session has this name)") {
		t.Fatalf("warnings = %+v", w)
	}
}

// TestExtraToolSourceWithToolSearch: with tool_search active, a change
// rebuilds the catalogue in the system prompt; a loaded tool that stays
// stays loaded, a new tool is deferred (and must be searched for), a
// removed tool is gone.
func TestExtraToolSourceWithToolSearch(t *testing.T) {
	src := &changingSource{}
	b := extraTool("src_b", objSchema, "b ran")
	c := extraTool("src_c", objSchema, "c ran")
	d := extraTool("src_d", objSchema, "d ran")
	a := tool.Registered{Definition: tool.Definition{Name: "src_a", Description: "changes the source", Parameters: []byte(objSchema)},
		Executor: func(context.Context, *tool.Invocation) (tool.Result, error) {
			src.change(src.Tools()[0], c, d) // b goes, d comes
			return tool.Result{Output: "a ran"}, nil
		}}
	src.tools = []tool.Registered{a, b, c}
	p := anthropic()
	env, _ := newEnv(t)
	s := script(
		tools(call(loop.ToolSearchToolName, map[string]string{"query": "select:src_a"})),
		tools(call("src_a", map[string]string{})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "a ran"},
			ToolCalls: []scripted.ToolCall{call("src_d", map[string]string{}), call("src_b", map[string]string{})}},
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "no longer available"},
			ToolCalls: []scripted.ToolCall{call(loop.ToolSearchToolName, map[string]string{"query": "select:src_d"})}},
		tools(call("src_d", map[string]string{})),
		scripted.Turn{Expect: &scripted.Expect{LastToolResultContains: "d ran"}, Text: "done"},
	)
	spy := &spyClient{inner: scriptedClient(t, p, s)}
	sess, err := loop.New(p, env, spy, loop.WithExtraToolSource("S", src), loop.WithToolSearch(loop.ToolSearchConfig{Threshold: 1}))
	if err != nil {
		t.Fatal(err)
	}
	evs := submitAndClose(t, sess, "go")
	reqs := spy.requests()
	if len(reqs) != 6 {
		t.Fatalf("%d requests, want 6", len(reqs))
	}
	system := func(r *llm.Request) string { return r.Messages[0].Text() }
	if sys := system(reqs[1]); !strings.Contains(sys, "- src_b") || strings.Contains(sys, "- src_d") {
		t.Errorf("catalogue before the change does not list src_b only:\n%s", sys)
	}
	if sys := system(reqs[2]); strings.Contains(sys, "- src_b") || !strings.Contains(sys, "- src_d") || !strings.Contains(sys, "- src_a") {
		t.Errorf("catalogue after the change, want src_a and src_d without src_b:\n%s", sys)
	}
	if got := toolNames(reqs[2]); !slices.Contains(got, "src_a") || slices.Contains(got, "src_d") {
		t.Errorf("tools after the change = %v, want src_a still loaded and src_d deferred", got)
	}
	ends := ofKind(evs, loop.EventToolCallEnd)
	if len(ends) != 6 {
		t.Fatalf("%d tool call ends, want 6", len(ends))
	}
	errs := map[string]string{} // the round's two calls end in any order
	for _, e := range ends[2:4] {
		errs[e.Data.ToolName] = e.Data.Error
	}
	if !strings.Contains(errs["src_d"], "deferred") || !strings.Contains(errs["src_b"], "no longer available") {
		t.Errorf("calls to the new and the removed tool = %q", errs)
	}
	deferred, loaded := sess.DeferredTools()
	if !slices.Equal(deferred, []string{"src_a", "src_c", "src_d"}) || !slices.Equal(loaded, []string{"src_a", "src_d"}) {
		t.Errorf("deferred %v, loaded %v", deferred, loaded)
	}
}

// submitAndClose submits input to sess, closes it and returns every event
// it emitted.
func submitAndClose(t *testing.T, sess *loop.Session, input string) []loop.Event {
	t.Helper()
	rec := record(sess)
	if err := sess.Submit(t.Context(), input); err != nil {
		t.Fatal(err)
	}
	_ = sess.Close()
	return rec.All(t)
}
