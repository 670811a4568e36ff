package mcp_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/looptest"
	"github.com/agent-operator/agent-operator/internal/mcp"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

// TestThroughTheLoop: a scripted model calls MCP tools by their loop names;
// the results (and the server's error result, and a timeout) reach the next
// turn, and the header value sent to the server appears in no event.
func TestThroughTheLoop(t *testing.T) {
	const secret = "Bearer s3cret-token"
	srv := mcptest.New(t, 0)
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: srv.URL, Timeout: time.Second,
		Headers: map[string]string{"Authorization": secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer srv.Release()

	script := looptest.Script(
		looptest.Tools(looptest.Call("mcp__demo__echo", map[string]string{"text": "hello"})),
		scripted.Turn{Expect: looptest.ExpectResult("echo: hello"),
			ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__fail", map[string]string{})}},
		scripted.Turn{Expect: looptest.ExpectResult("the thing is broken"),
			ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__echo", map[string]int{"text": 3})}},
		scripted.Turn{Expect: looptest.ExpectResult("invalid arguments"),
			ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__slow", map[string]string{})}},
		scripted.Turn{Expect: looptest.ExpectResult("no answer within 1s"), Text: "Done."},
	)
	p := profile.Anthropic("claude-sonnet-4-5")
	env, _ := looptest.NewEnv(t)
	sess := looptest.NewSession(t, func(_ *testing.T, p loop.Profile, s *scripted.Script) loop.Client {
		return scripted.New(s, p.Model())
	}, p, env, script, loop.WithExtraTools(c.Tools()...))
	rec := looptest.Record(sess)
	if err := sess.Submit(t.Context(), "use the demo server"); err != nil {
		t.Fatal(err)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	evs := rec.All(t)
	ends := looptest.OfKind(evs, loop.EventToolCallEnd)
	if len(ends) != 4 {
		t.Fatalf("%d tool call ends, want 4", len(ends))
	}
	wantErr := []bool{false, true, true, true}
	for i, e := range ends {
		if e.Data.IsError != wantErr[i] {
			t.Errorf("call %d (%s): isError = %v, want %v", i, e.Data.ToolName, e.Data.IsError, wantErr[i])
		}
	}
	if got := ends[0].Data.Output; got != "echo: hello" {
		t.Errorf("echo output = %q", got)
	}
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "s3cret") {
			t.Fatalf("event %s carries the header value: %s", e.Kind, b)
		}
	}
	if h := srv.Headers(); len(h) == 0 || h[len(h)-1].Get("Authorization") != secret {
		t.Fatalf("the server did not get the header: %v", h)
	}
}
