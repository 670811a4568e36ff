package loop_test

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// TestWebSearchOnEveryRequest: WithWebSearch puts the options on every
// model request of the session and of its in-process subagents; the
// scripted search of the child's answer comes back to the parent's wait,
// and a session without it sends none.
func TestWebSearchOnEveryRequest(t *testing.T) {
	ws := &llm.WebSearch{MaxUses: 2, AllowedDomains: []string{"go.dev"}}
	for _, on := range []bool{true, false} {
		env, _ := newEnv(t)
		expect := &scripted.Expect{WebSearch: ws}
		childTurn := scripted.Turn{Expect: expect, Text: "Go 1.26 shipped in February.",
			WebSearch: &scripted.WebSearch{Query: "go 1.26", Results: []llm.WebSearchResult{{URL: "https://go.dev/blog/go1.26"}}}}
		if !on {
			expect, childTurn = nil, text("No search.")
		}
		sc := script(
			scripted.Turn{Expect: expect, ToolCalls: []scripted.ToolCall{call("spawn_agent", map[string]any{"task": "look up go 1.26"})}},
			scripted.Turn{Expect: expect, ToolCalls: []scripted.ToolCall{call("wait", map[string]any{"agent_id": "p-agent-1"})}},
			scripted.Turn{Expect: expect, Text: "Done."},
		)
		sc.Agents = []scripted.Agent{{Match: "look up go 1.26", Turns: []scripted.Turn{childTurn}}}
		spy := &spyClient{inner: scripted.New(sc, "m")}
		opts := []loop.Option{loop.WithID("p")}
		if on {
			opts = append(opts, loop.WithWebSearch(ws))
		}
		s, err := loop.New(anthropic(), env, spy, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(t.Context(), "Find out when Go 1.26 shipped"); err != nil {
			t.Fatalf("web search %v: %v", on, err)
		}
		_ = s.Close()
		reqs := spy.requests()
		if len(reqs) != 4 {
			t.Fatalf("web search %v: %d requests, want 4 (3 parent, 1 child)", on, len(reqs))
		}
		for i, r := range reqs {
			if (r.WebSearch != nil) != on {
				t.Errorf("web search %v: request %d carries %+v", on, i, r.WebSearch)
			}
		}
		if on {
			if got := lastResults(t, s)[0].Content; !strings.Contains(got, "Go 1.26 shipped in February.") {
				t.Errorf("wait result %q", got)
			}
		}
	}
}
