package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// mcpRuns counts the runs of MCP-like tools by "name title".
type mcpRuns struct {
	mu   sync.Mutex
	runs map[string]int
}

func (r *mcpRuns) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// mcpLikeTools returns n tools shaped like an MCP server's (a description of
// two sentences, four documented properties, about 700 bytes each); the
// first is mcp__tracker__create_issue. Each run is counted in runs.
func mcpLikeTools(n int, runs *mcpRuns) []tool.Registered {
	out := make([]tool.Registered, 0, n)
	for i := range n {
		name := fmt.Sprintf("mcp__srv%d__op_%03d", i%7, i)
		desc := fmt.Sprintf("Performs operation %d on the records of service %d. Use it when the task needs the "+
			"records it returns; results are paginated and sorted by update time, newest first.", i, i%7)
		if i == 0 {
			name, desc = "mcp__tracker__create_issue", "Create an issue in the team's tracker. Returns the new issue's key."
		}
		schema := `{"type":"object","properties":{` +
			`"title":{"type":"string","description":"The title of the record, at most 200 characters long."},` +
			`"query":{"type":"string","description":"A filter in the service's query language, e.g. status:open."},` +
			`"limit":{"type":"integer","minimum":1,"maximum":100,"description":"How many records to return at most."},` +
			`"cursor":{"type":"string","description":"The cursor of the next page, from the previous result."}},` +
			`"required":["title"],"additionalProperties":false}`
		out = append(out, tool.Registered{
			Definition: tool.Definition{Name: name, Description: desc, Parameters: json.RawMessage(schema)},
			Executor: func(_ context.Context, inv *tool.Invocation) (tool.Result, error) {
				var a struct{ Title string }
				_ = json.Unmarshal(inv.Arguments, &a)
				if runs != nil {
					runs.mu.Lock()
					runs.runs[inv.Name+" "+a.Title]++
					runs.mu.Unlock()
				}
				return tool.Result{Output: "ran " + inv.Name + ": " + a.Title}, nil
			},
		})
	}
	return out
}

func toolNames(req *llm.Request) []string {
	var names []string
	for _, d := range req.Tools {
		names = append(names, d.Name)
	}
	return names
}

func mcpNames(req *llm.Request) []string {
	var names []string
	for _, n := range toolNames(req) {
		if strings.HasPrefix(n, "mcp__") {
			names = append(names, n)
		}
	}
	return names
}

func systemPrompt(req *llm.Request) string {
	if len(req.Messages) == 0 || req.Messages[0].Role != llm.RoleSystem {
		return ""
	}
	return req.Messages[0].Text()
}

const createIssue = "mcp__tracker__create_issue"

func searchCall(query string) scripted.ToolCall {
	return call(loop.ToolSearchToolName, map[string]string{"query": query})
}

func issueCall(title string) scripted.ToolCall {
	return call(createIssue, map[string]string{"title": title})
}

// TestToolSearch: past the threshold the extra tools are listed by name in
// the system prompt and not sent; tool_search returns their schemas and
// makes them callable from the next model request; a call before that is
// an error result the model can act on.
func TestToolSearch(t *testing.T) {
	big := `{"type":"object","properties":{"blob":{"type":"string","description":"` + strings.Repeat("x", 10<<10) + `"}}}`
	bigTools := []tool.Registered{extraTool("mcp__big__a", big, "a"), extraTool("mcp__big__b", big, "b"),
		extraTool("mcp__big__c", big, "c"), extraTool("mcp__big__d", big, "d")}
	cases := []struct {
		name   string
		tools  func(*mcpRuns) []tool.Registered
		opts   []loop.Option
		turns  []scripted.Turn
		check  func(t *testing.T, reqs []*llm.Request, runs *mcpRuns, results []llm.ToolResult)
		banned string // no request may offer a tool whose name contains this
	}{
		{
			name:  "200 tools: names only, search, call on the next turn",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(200, r) },
			turns: []scripted.Turn{
				tools(searchCall("create issue tracker")),
				{Expect: &scripted.Expect{LastToolResultContains: `"name":"` + createIssue + `"`}, ToolCalls: []scripted.ToolCall{issueCall("x")}},
				{Expect: &scripted.Expect{LastToolResultContains: "ran " + createIssue + ": x"}, Text: "done"},
			},
			check: func(t *testing.T, reqs []*llm.Request, runs *mcpRuns, _ []llm.ToolResult) {
				mustf(t, len(reqs) == 3, "%d requests, want 3", len(reqs))
				first := reqs[0]
				mustf(t, len(mcpNames(first)) == 0, "first request offers MCP tools %v", mcpNames(first))
				mustf(t, slices.Contains(toolNames(first), loop.ToolSearchToolName), "tool_search not offered: %v", toolNames(first))
				sys := systemPrompt(first)
				mustf(t, strings.Contains(sys, "- "+createIssue+": Create an issue in the team's tracker.\n"),
					"catalogue line of %s missing from the system prompt", createIssue)
				mustf(t, strings.Count(sys, "\n- mcp__") == 200, "catalogue lists %d tools, want 200", strings.Count(sys, "\n- mcp__"))
				mustf(t, !strings.Contains(sys, "Returns the new issue's key"), "catalogue carries more than the first sentence")
				for i, r := range reqs[1:] {
					mustf(t, slices.Equal(mcpNames(r), []string{createIssue}), "request %d offers %v, want only %s", i+2, mcpNames(r), createIssue)
					mustf(t, toolNames(r)[len(r.Tools)-1] == createIssue, "the loaded tool is not last: %v", toolNames(r))
					mustf(t, slices.Equal(toolNames(r)[:len(r.Tools)-1], toolNames(first)), "request %d changed the tools before the loaded one", i+2)
					mustf(t, systemPrompt(r) == sys, "request %d changed the system prompt", i+2)
				}
				mustf(t, runs.count(createIssue+" x") == 1, "create_issue ran %d times", runs.count(createIssue+" x"))
			},
		},
		{
			name:  "a call before the search is an error result; searching then calling works",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(200, r) },
			turns: []scripted.Turn{
				tools(issueCall("early")),
				{Expect: &scripted.Expect{LastToolResultContains: `query "select:` + createIssue + `" first`},
					ToolCalls: []scripted.ToolCall{searchCall("select:" + createIssue)}},
				{Expect: &scripted.Expect{LastToolResultContains: createIssue}, ToolCalls: []scripted.ToolCall{issueCall("late")}},
				{Expect: &scripted.Expect{LastToolResultContains: "ran " + createIssue + ": late"}, Text: "done"},
			},
			check: func(t *testing.T, _ []*llm.Request, runs *mcpRuns, _ []llm.ToolResult) {
				mustf(t, runs.count(createIssue+" early") == 0, "the unloaded tool ran")
				mustf(t, runs.count(createIssue+" late") == 1, "the loaded tool ran %d times", runs.count(createIssue+" late"))
			},
		},
		{
			name:  "a call in the same round as its search is not loaded yet",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(200, r) },
			turns: []scripted.Turn{
				tools(searchCall("select:"+createIssue), issueCall("same")),
				{Expect: &scripted.Expect{LastToolResultContains: "not loaded yet"}, ToolCalls: []scripted.ToolCall{issueCall("next")}},
				{Expect: &scripted.Expect{LastToolResultContains: "ran " + createIssue + ": next"}, Text: "done"},
			},
			check: func(t *testing.T, reqs []*llm.Request, runs *mcpRuns, _ []llm.ToolResult) {
				mustf(t, runs.count(createIssue+" same") == 0, "the tool ran in the round of its search")
				mustf(t, runs.count(createIssue+" next") == 1, "the tool did not run on the next turn")
				mustf(t, slices.Equal(mcpNames(reqs[1]), []string{createIssue}), "second request offers %v", mcpNames(reqs[1]))
			},
		},
		{
			name:  "keywords rank names first and max_results bounds the matches",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(200, r) },
			turns: []scripted.Turn{
				tools(call(loop.ToolSearchToolName, map[string]any{"query": "op_01 records", "max_results": 3})),
				{Expect: &scripted.Expect{LastToolResultContains: `"name":"mcp__srv3__op_010"`}, Text: "found"},
			},
			check: func(t *testing.T, reqs []*llm.Request, _ *mcpRuns, results []llm.ToolResult) {
				var out struct{ Tools []tool.Definition }
				if err := json.Unmarshal([]byte(results[0].Content), &out); err != nil {
					t.Fatalf("tool_search output is not JSON: %v", err)
				}
				var names []string
				for _, d := range out.Tools {
					names = append(names, d.Name)
					mustf(t, len(d.Parameters) > 0, "no schema for %s", d.Name)
				}
				want := []string{"mcp__srv3__op_010", "mcp__srv4__op_011", "mcp__srv5__op_012"}
				mustf(t, slices.Equal(names, want), "found %v, want %v", names, want)
				mustf(t, slices.Equal(mcpNames(reqs[1]), want), "second request offers %v, want %v", mcpNames(reqs[1]), want)
			},
		},
		{
			name:  "an unknown name is an error result",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(200, r) },
			turns: []scripted.Turn{
				tools(searchCall("select:mcp__nope__x")),
				{Expect: &scripted.Expect{LastToolResultContains: "no deferred tool is named mcp__nope__x"}, Text: "ok"},
			},
			check: func(t *testing.T, reqs []*llm.Request, _ *mcpRuns, results []llm.ToolResult) {
				mustf(t, results[0].IsError, "unknown name gave a success result")
				mustf(t, len(mcpNames(reqs[1])) == 0, "second request offers %v", mcpNames(reqs[1]))
			},
		},
		{
			name:  "under the threshold every tool is sent",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(loop.DefaultToolSearchThreshold, r) },
			turns: []scripted.Turn{tools(issueCall("direct")), {Expect: &scripted.Expect{LastToolResultContains: "ran"}, Text: "done"}},
			check: func(t *testing.T, reqs []*llm.Request, runs *mcpRuns, _ []llm.ToolResult) {
				mustf(t, len(mcpNames(reqs[0])) == loop.DefaultToolSearchThreshold, "offers %d MCP tools", len(mcpNames(reqs[0])))
				mustf(t, !strings.Contains(systemPrompt(reqs[0]), "Deferred tools"), "catalogue in the prompt")
				mustf(t, runs.count(createIssue+" direct") == 1, "the tool did not run")
			},
			banned: loop.ToolSearchToolName,
		},
		{
			name:  "disabled sends 200 tools",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(200, r) },
			opts:  []loop.Option{loop.WithToolSearch(loop.ToolSearchConfig{Disabled: true})},
			turns: []scripted.Turn{text("done")},
			check: func(t *testing.T, reqs []*llm.Request, _ *mcpRuns, _ []llm.ToolResult) {
				mustf(t, len(mcpNames(reqs[0])) == 200, "offers %d MCP tools, want 200", len(mcpNames(reqs[0])))
			},
			banned: loop.ToolSearchToolName,
		},
		{
			name:  "a lower count threshold defers 10 tools",
			tools: func(r *mcpRuns) []tool.Registered { return mcpLikeTools(10, r) },
			opts:  []loop.Option{loop.WithToolSearch(loop.ToolSearchConfig{Threshold: 5})},
			turns: []scripted.Turn{text("done")},
			check: func(t *testing.T, reqs []*llm.Request, _ *mcpRuns, _ []llm.ToolResult) {
				mustf(t, len(mcpNames(reqs[0])) == 0, "offers %v", mcpNames(reqs[0]))
				mustf(t, slices.Contains(toolNames(reqs[0]), loop.ToolSearchToolName), "no tool_search")
			},
		},
		{
			name:  "few tools with large schemas pass the byte threshold",
			tools: func(*mcpRuns) []tool.Registered { return bigTools },
			turns: []scripted.Turn{tools(searchCall("select:mcp__big__b")), {Expect: &scripted.Expect{LastToolResultContains: "mcp__big__b"}, Text: "done"}},
			check: func(t *testing.T, reqs []*llm.Request, _ *mcpRuns, _ []llm.ToolResult) {
				mustf(t, len(mcpNames(reqs[0])) == 0, "offers %v", mcpNames(reqs[0]))
				mustf(t, slices.Equal(mcpNames(reqs[1]), []string{"mcp__big__b"}), "second request offers %v", mcpNames(reqs[1]))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := anthropic()
			env, _ := newEnv(t)
			runs := &mcpRuns{runs: map[string]int{}}
			spy := &spyClient{inner: scriptedClient(t, p, script(tc.turns...))}
			sess, err := loop.New(p, env, spy, append([]loop.Option{loop.WithExtraTools(tc.tools(runs)...)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			rec := record(sess)
			if err := sess.Submit(t.Context(), "go"); err != nil {
				t.Fatal(err)
			}
			_ = sess.Close()
			rec.All(t)
			var results []llm.ToolResult
			for _, turn := range sess.History() {
				if r, ok := turn.(*loop.ToolResultsTurn); ok {
					results = append(results, r.Results...)
				}
			}
			reqs := spy.requests()
			mustf(t, len(reqs) == len(tc.turns), "%d requests, want %d", len(reqs), len(tc.turns))
			if tc.banned != "" {
				for i, r := range reqs {
					mustf(t, !slices.Contains(toolNames(r), tc.banned), "request %d offers %s", i+1, tc.banned)
				}
			}
			tc.check(t, reqs, runs, results)
		})
	}
}

// TestToolSearchRestore: a session restored from any prefix of its journal
// after the search offers the loaded tool again without a new search, and
// each call of it runs at most once overall.
func TestToolSearchRestore(t *testing.T) {
	sc := func() *scripted.Script {
		return script(
			tools(searchCall("select:"+createIssue)),
			tools(issueCall("x")),
			text("done"),
			tools(issueCall("y")), // the second input: no search
			text("done again"),    // (an interrupted call is answered too)
		)
	}
	seq := func() loop.Profile {
		return withCaps(anthropic(), func(c *loop.Capabilities) { c.ParallelToolCalls = false; c.Streaming = false })
	}
	env, _ := newEnv(t)
	j := &memJournal{}
	runs := &mcpRuns{runs: map[string]int{}}
	s := newSession(t, seq(), env, sc(), loop.WithJournal(j), loop.WithID("ts"), loop.WithExtraTools(mcpLikeTools(200, runs)...))
	rec := record(s)
	for _, in := range []string{"file x", "file y"} {
		if err := s.Submit(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	full, _ := j.snapshot()
	_ = s.Close()
	rec.All(t)
	searchEnd := slices.IndexFunc(full, func(ev loop.Event) bool {
		return ev.Kind == loop.EventToolCallEnd && ev.Data.ToolName == loop.ToolSearchToolName
	})
	mustf(t, searchEnd >= 0, "no tool_search end journaled")

	for cut := searchEnd + 1; cut <= len(full); cut++ {
		t.Run(fmt.Sprintf("cut_%d_after_%s", cut, full[cut-1].Kind), func(t *testing.T) {
			prefix := full[:cut]
			started := map[string]bool{}
			inputs := 0
			for _, ev := range prefix {
				switch ev.Kind {
				case loop.EventToolCallStart:
					started[ev.Data.CallID] = true
				case loop.EventUserInput:
					inputs++
				}
			}
			env2, _ := newEnv(t)
			runs2 := &mcpRuns{runs: map[string]int{}}
			spy := &spyClient{inner: scriptedClient(t, seq(), sc())}
			s2, err := loop.New(seq(), env2, spy, loop.WithRestore(prefix), loop.WithJournal(&memJournal{}),
				loop.WithExtraTools(mcpLikeTools(200, runs2)...))
			if err != nil {
				t.Fatal(err)
			}
			rec2 := record(s2)
			if s2.NeedsResume() {
				if err := s2.Resume(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if inputs < 2 {
				if err := s2.Submit(t.Context(), "file y"); err != nil {
					t.Fatal(err)
				}
			}
			_ = s2.Close()
			rec2.All(t)
			_, loaded := s2.DeferredTools()
			mustf(t, slices.Equal(loaded, []string{createIssue}), "loaded tools %v after restore", loaded)
			for i, r := range spy.requests() {
				mustf(t, slices.Equal(mcpNames(r), []string{createIssue}), "restored request %d offers %v", i+1, mcpNames(r))
			}
			for title, callID := range map[string]string{"x": "call_2_1", "y": "call_4_1"} {
				want := 1
				if started[callID] {
					want = 0
				}
				if got := runs2.count(createIssue + " " + title); got != want {
					t.Errorf("%s ran %d times after restore, want %d", title, got, want)
				}
			}
			for _, turn := range s2.History() {
				if r, ok := turn.(*loop.ToolResultsTurn); ok {
					for _, res := range r.Results {
						mustf(t, !strings.Contains(res.Content, "not loaded yet"), "restored session refused the loaded tool: %s", res.Content)
					}
				}
			}
		})
	}
}

// TestToolSearchConfig: negative thresholds and an extra tool named
// tool_search are refused when the session is created.
func TestToolSearchConfig(t *testing.T) {
	cases := []struct {
		name string
		opts []loop.Option
		want string
	}{
		{"negative threshold", []loop.Option{loop.WithToolSearch(loop.ToolSearchConfig{Threshold: -1})}, "negative"},
		{"negative bytes", []loop.Option{loop.WithToolSearch(loop.ToolSearchConfig{ThresholdBytes: -1})}, "negative"},
		{"name clash", []loop.Option{loop.WithToolSearch(loop.ToolSearchConfig{Threshold: 1}),
			loop.WithExtraTools(extraTool(loop.ToolSearchToolName, `{"type":"object"}`, ""), extraTool("mcp__a__b", `{"type":"object"}`, ""))},
			"named tool_search"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := newEnv(t)
			_, err := loop.New(anthropic(), env, scriptedClient(t, anthropic(), script(text("x"))), tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// promptTokens estimates the input tokens of req including its tool
// definitions (1 token ~ 4 bytes, as requestTokens).
func promptTokens(req *llm.Request) int {
	n := 0
	for _, d := range req.Tools {
		n += len(d.Name) + len(d.Description) + len(d.Parameters)
	}
	return requestTokens(req) + n/4
}

// BenchmarkToolSearchPromptTokens reports the estimated input tokens of the
// first request of a session with n MCP-like tools (about 700 bytes of
// definition each), with tool search disabled ("off": every definition is
// sent) and at the default thresholds ("on": names and one-line
// descriptions in the system prompt, plus tool_search), and the tokens one
// tool_search round adds to the next request (its result: one tool's
// schema). Below the default threshold "on" equals "off".
func BenchmarkToolSearchPromptTokens(b *testing.B) {
	for _, n := range []int{20, 40, 80, 200} {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			env, err := localenv.New(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = env.Close() }()
			first := func(cfg loop.ToolSearchConfig, sc *scripted.Script) []*llm.Request {
				spy := &spyClient{inner: scripted.New(sc, "m")}
				s, err := loop.New(anthropic(), env, spy, loop.WithExtraTools(mcpLikeTools(n, nil)...), loop.WithToolSearch(cfg))
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for range s.Events() {
					}
				}()
				if err := s.Submit(b.Context(), "go"); err != nil {
					b.Fatal(err)
				}
				_ = s.Close()
				return spy.requests()
			}
			var off, on, search int
			for b.Loop() {
				off = promptTokens(first(loop.ToolSearchConfig{Disabled: true}, looptest.Script(looptest.Text("ok")))[0])
				reqs := first(loop.ToolSearchConfig{}, looptest.Script(looptest.Text("ok")))
				on = promptTokens(reqs[0])
				if n > loop.DefaultToolSearchThreshold {
					reqs = first(loop.ToolSearchConfig{}, looptest.Script(
						looptest.Tools(looptest.Call(loop.ToolSearchToolName, map[string]string{"query": "select:" + createIssue})),
						looptest.Text("ok")))
					search = promptTokens(reqs[1]) - on
				}
			}
			b.ReportMetric(float64(off), "input-tokens-off")
			b.ReportMetric(float64(on), "input-tokens-on")
			b.ReportMetric(float64(off)/float64(on), "x-fewer")
			b.ReportMetric(float64(search), "search-round-tokens")
		})
	}
}
