package anthropic

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// newClient builds the adapter under test for a fake server.
var newClient = llmtest.Constructor(New, targetConfig)

// targetConfig is the adapter configuration for a test target.
func targetConfig(tg llmtest.Target) Config {
	return Config{APIKey: tg.APIKey, BaseURL: tg.BaseURL, Model: tg.Model, StreamIdleTimeout: tg.StreamIdleTimeout}
}

func TestSuite(t *testing.T) {
	llmtest.Suite{
		Protocol:       llmtest.Anthropic,
		New:            newClient,
		SecretEnv:      []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"},
		CheckRequest:   checkRequests,
		CheckCaching:   checkCaching,
		WebSearch:      &llm.WebSearch{MaxUses: 3, AllowedDomains: []string{"go.dev"}},
		CheckWebSearch: checkWebSearch,
	}.Run(t)
}

// checkWebSearch asserts the web_search_20250305 tool with its options on
// the first request, and the server_tool_use and web_search_tool_result
// blocks sent back verbatim, before the text, on the second.
func checkWebSearch(t *testing.T, reqs []llmtest.Request) {
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	tool, _ := llmtest.Path(reqs[0].Body, "tools", 0).(map[string]any)
	want := map[string]any{"type": "web_search_20250305", "name": "web_search", "max_uses": float64(3), "allowed_domains": []any{"go.dev"}}
	for k, v := range want {
		if got, _ := json.Marshal(tool[k]); string(got) != string(must(json.Marshal(v))) {
			t.Errorf("tools.0.%s = %s, want %v", k, got, v)
		}
	}
	if _, ok := tool["blocked_domains"]; ok {
		t.Error("tools.0 has blocked_domains")
	}
	assistant := llmtest.Path(reqs[1].Body, "messages", 1, "content")
	for i, typ := range []string{"server_tool_use", "web_search_tool_result", "text"} {
		if got := llmtest.Path(assistant, i, "type"); got != typ {
			t.Errorf("messages.1.content.%d.type = %v, want %s", i, got, typ)
		}
	}
	if llmtest.Path(assistant, 0, "id") != llmtest.Path(assistant, 1, "tool_use_id") || llmtest.Path(assistant, 0, "input", "query") != llmtest.WebSearchQuery {
		t.Errorf("search blocks not sent back as received: %v", assistant)
	}
	if enc, _ := llmtest.Path(assistant, 1, "content", 0, "encrypted_content").(string); enc == "" {
		t.Error("web_search_result sent back without its encrypted_content")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// checkCaching asserts that each request of the suite's three-request
// conversation carries exactly three breakpoints: the last tool, the last
// system block and the last block of the conversation so far, which moves
// forward with every request (never onto a thinking block).
func checkCaching(t *testing.T, reqs []llmtest.Request) {
	want := [][]string{
		{"tools.1", "system.0", "messages.0.content.0"},
		// user; assistant thinking, tool_use, tool_use; user tool_result ×2
		{"tools.1", "system.0", "messages.2.content.1"},
		// …; assistant thinking, tool_use; user tool_result
		{"tools.1", "system.0", "messages.4.content.0"},
	}
	for i, r := range reqs {
		got := llmtest.CacheBreakpoints(r.Body)
		if !slices.Equal(got, want[i]) || len(got) > llmtest.MaxCacheBreakpoints {
			t.Errorf("request %d: breakpoints %v, want %v", i+1, got, want[i])
		}
		if i > 0 && llmtest.Path(r.Body, "messages", 1, "content", 0, "type") != "thinking" {
			t.Errorf("request %d: the assistant turn does not start with its thinking block", i+1)
		}
	}
}

func TestCacheBreakpoints(t *testing.T) {
	c, err := New(Config{Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	thinking := llm.ContentPart{Kind: llm.PartReasoning, Provider: ProviderName,
		Raw: json.RawMessage(`{"type":"thinking","thinking":"hm","signature":"c2ln"}`)}
	call := llm.ContentPart{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: "t1", Name: "shell", Arguments: json.RawMessage(`{}`)}}
	png := llm.Image{MediaType: "image/png", Data: []byte("png")}
	tools := []llm.ToolDefinition{llmtest.Weather, llmtest.Add, {Name: "shell"}}
	tests := []struct {
		name string
		req  llm.Request
		want []string
	}{
		{name: "user message only",
			req:  llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}},
			want: []string{"messages.0.content.0"}},
		{name: "system, tools and a user message",
			req: llm.Request{Tools: tools, Messages: []llm.Message{
				llm.TextMessage(llm.RoleSystem, "sys"), llm.TextMessage(llm.RoleUser, "hi")}},
			want: []string{"tools.2", "system.0", "messages.0.content.0"}},
		{name: "only the last of several system blocks",
			req: llm.Request{Messages: []llm.Message{
				llm.TextMessage(llm.RoleSystem, "one"), llm.TextMessage(llm.RoleSystem, "two"), llm.TextMessage(llm.RoleUser, "hi")}},
			want: []string{"system.1", "messages.0.content.0"}},
		{name: "steering text after tool results",
			req: llm.Request{Tools: tools, Messages: []llm.Message{
				llm.TextMessage(llm.RoleSystem, "sys"), llm.TextMessage(llm.RoleUser, "go"),
				{Role: llm.RoleAssistant, Content: []llm.ContentPart{thinking, call}},
				{Role: llm.RoleTool, Content: []llm.ContentPart{{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: "t1", Content: "ok"}}}},
				llm.TextMessage(llm.RoleUser, "steer")}},
			want: []string{"tools.2", "system.0", "messages.2.content.1"}},
		{name: "a tool result with an image is marked as a whole",
			req: llm.Request{Messages: []llm.Message{
				llm.TextMessage(llm.RoleUser, "look"),
				{Role: llm.RoleAssistant, Content: []llm.ContentPart{call}},
				{Role: llm.RoleTool, Content: []llm.ContentPart{{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: "t1", Content: "shot", Images: []llm.Image{png}}}}}}},
			want: []string{"messages.2.content.0"}},
		{name: "a user image last",
			req: llm.Request{Messages: []llm.Message{
				{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "see"}, {Kind: llm.PartImage, Image: &png}}}}},
			want: []string{"messages.0.content.1"}},
		{name: "an assistant prefill skips its thinking block",
			req: llm.Request{Messages: []llm.Message{
				llm.TextMessage(llm.RoleUser, "go"),
				{Role: llm.RoleAssistant, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "So"}, thinking}}}},
			want: []string{"messages.1.content.0"}},
		{name: "a last message with nothing cacheable gets none",
			req: llm.Request{Tools: tools, Messages: []llm.Message{
				llm.TextMessage(llm.RoleSystem, "sys"), llm.TextMessage(llm.RoleUser, "go"),
				{Role: llm.RoleAssistant, Content: []llm.ContentPart{thinking}}}},
			want: []string{"tools.2", "system.0"}},
		{name: "disable_cache",
			req: llm.Request{Tools: tools, ProviderOptions: map[string]json.RawMessage{"anthropic": json.RawMessage(`{"disable_cache":true}`)},
				Messages: []llm.Message{llm.TextMessage(llm.RoleSystem, "sys"), llm.TextMessage(llm.RoleUser, "hi")}},
			want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, err := c.params(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if got := llmtest.CacheBreakpoints(body); !slices.Equal(got, tt.want) {
				t.Fatalf("breakpoints %v, want %v\n%s", got, tt.want, raw)
			}
		})
	}
}

func checkRequests(t *testing.T, reqs []llmtest.Request) {
	first, second := reqs[0], reqs[1]
	if got := first.Header.Get("X-Api-Key"); got != "test-key" {
		t.Fatalf("X-Api-Key = %q", got)
	}
	if first.Header.Get("Anthropic-Version") == "" {
		t.Fatal("no Anthropic-Version header")
	}
	// System prompt top-level with a cache breakpoint.
	if llmtest.Path(first.Body, "system", 0, "text") != "You are a helpful assistant." || llmtest.Path(first.Body, "system", 0, "cache_control", "type") != "ephemeral" {
		t.Fatalf("system = %v", first.Body["system"])
	}
	// Thinking budget from effort high, below max_tokens.
	if llmtest.Path(first.Body, "thinking", "type") != "enabled" || llmtest.Path(first.Body, "thinking", "budget_tokens") != float64(24576) || first.Body["max_tokens"] != float64(DefaultMaxOutputTokens) {
		t.Fatalf("thinking = %v max_tokens = %v", first.Body["thinking"], first.Body["max_tokens"])
	}
	if llmtest.Path(first.Body, "tools", 1, "cache_control", "type") != "ephemeral" || llmtest.Path(first.Body, "tools", 0, "input_schema", "required", 0) != "location" {
		t.Fatalf("tools = %v", first.Body["tools"])
	}
	if llmtest.Path(first.Body, "tool_choice", "type") != "auto" || llmtest.Path(first.Body, "tool_choice", "disable_parallel_tool_use") != false {
		t.Fatalf("tool_choice = %v", first.Body["tool_choice"])
	}
	msgs, _ := second.Body["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("second request has %d messages, want user, assistant, user: %v", len(msgs), msgs)
	}
	// The assistant turn echoes the thinking block with its signature first.
	if llmtest.Path(msgs, 1, "content", 0, "type") != "thinking" || llmtest.Path(msgs, 1, "content", 0, "signature") == "" {
		t.Fatalf("assistant content = %v", llmtest.Path(msgs, 1, "content"))
	}
	// Tool results first, in call order, then the steering text; the last
	// block carries the conversation-prefix cache breakpoint.
	user := llmtest.Path(msgs, 2, "content").([]any)
	if len(user) != 3 || llmtest.Path(user, 0, "type") != "tool_result" || llmtest.Path(user, 0, "tool_use_id") != "call_w" ||
		llmtest.Path(user, 1, "tool_use_id") != "call_a" || llmtest.Path(user, 2, "type") != "text" {
		b, _ := json.Marshal(user)
		t.Fatalf("user content = %s", b)
	}
	if llmtest.Path(user, 2, "cache_control", "type") != "ephemeral" {
		t.Fatalf("last block has no cache breakpoint: %v", user[2])
	}
}

func TestParams(t *testing.T) {
	c, err := New(Config{Model: "claude-test"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        llm.Request
		wantBudget int64
		wantMax    int64
		wantErr    llm.ErrorKind
	}{
		{"no effort no thinking", llm.Request{}, 0, DefaultMaxOutputTokens, ""},
		{"low", llm.Request{ReasoningEffort: "low"}, 2048, DefaultMaxOutputTokens, ""},
		{"medium", llm.Request{ReasoningEffort: "medium"}, 8192, DefaultMaxOutputTokens, ""},
		{"budget clamped below max_tokens", llm.Request{ReasoningEffort: "high", MaxOutputTokens: 4000}, 3999, 4000, ""},
		{"tiny max_tokens raised for the minimum budget", llm.Request{ReasoningEffort: "low", MaxOutputTokens: 500}, 1524 - 1, 1524, ""},
		{"unknown effort", llm.Request{ReasoningEffort: "extreme"}, 0, 0, llm.KindInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Messages = []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}
			p, _, err := c.params(&tt.req)
			if tt.wantErr != "" {
				if llm.KindOf(err) != tt.wantErr {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var budget int64
			if p.Thinking.OfEnabled != nil {
				budget = p.Thinking.OfEnabled.BudgetTokens
			}
			if budget != tt.wantBudget || p.MaxTokens != tt.wantMax {
				t.Fatalf("budget %d max %d, want %d %d", budget, p.MaxTokens, tt.wantBudget, tt.wantMax)
			}
			if budget != 0 && (budget < 1024 || budget >= p.MaxTokens) {
				t.Fatalf("budget %d violates 1024 ≤ budget < max_tokens %d", budget, p.MaxTokens)
			}
		})
	}
}

func TestUnansweredToolUseGetsAnErrorResult(t *testing.T) {
	msgs := []llm.Message{
		llm.TextMessage(llm.RoleUser, "go"),
		{Role: llm.RoleAssistant, Content: []llm.ContentPart{
			{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: "a", Name: "x", Arguments: json.RawMessage(`{}`)}},
			{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: "b", Name: "x", Arguments: json.RawMessage(`{}`)}}}},
		{Role: llm.RoleTool, Content: []llm.ContentPart{{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: "b", Content: "ok"}}}},
		llm.TextMessage(llm.RoleUser, "steer"),
	}
	out, err := convertMessages(msgs)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	var decoded []any
	json.Unmarshal(b, &decoded)
	user := llmtest.Path(decoded, 2, "content").([]any)
	if len(out) != 3 || len(user) != 3 || llmtest.Path(user, 0, "tool_use_id") != "b" || llmtest.Path(user, 1, "tool_use_id") != "a" ||
		llmtest.Path(user, 1, "is_error") != true || llmtest.Path(user, 2, "text") != "steer" {
		t.Fatalf("messages = %s", b)
	}
}

func TestRecordings(t *testing.T) {
	llmtest.Recording{Protocol: llmtest.Anthropic, New: newClient, ReasoningRaw: true, Dirs: []string{
		"TestAnthropicCommon/claude-sonnet-4", "TestAnthropicCommonWithCacheControl/claude-sonnet-4",
		"TestAnthropicThinking/claude-sonnet-4", "TestAnthropicThinkingWithCacheControl/claude-sonnet-4"}}.Run(t)
}

func TestBetaHeadersAndImagesInToolResults(t *testing.T) {
	srv := llmtest.StartScript(t, llmtest.Anthropic, llmtest.ParseScript(t, `turns: [{text: "a wish"}, {text: "seen"}]`))
	c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), APIKey: "k", Model: "claude-test"})
	png := []byte("\x89PNG\r\n\x1a\nfake")
	req := &llm.Request{
		Messages: []llm.Message{
			llm.TextMessage(llm.RoleUser, "look"),
			{Role: llm.RoleAssistant, Content: []llm.ContentPart{{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: "t1", Name: "screenshot", Arguments: json.RawMessage(`{}`)}}}},
			{Role: llm.RoleTool, Content: []llm.ContentPart{{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: "t1", Content: "captured",
				Images: []llm.Image{{MediaType: "image/png", Data: png}}}}}},
		},
		ProviderOptions: map[string]json.RawMessage{"anthropic": json.RawMessage(`{"beta_headers":["interleaved-thinking-2025-05-14","context-1m-2025-08-07"]}`)},
	}
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got := srv.Requests()[0]
	if h := got.Header.Get("Anthropic-Beta"); h != "interleaved-thinking-2025-05-14,context-1m-2025-08-07" {
		t.Fatalf("anthropic-beta = %q", h)
	}
	result := llmtest.Path(got.Body, "messages", 2, "content", 0)
	if llmtest.Path(result, "type") != "tool_result" || llmtest.Path(result, "content", 0, "text") != "captured" ||
		llmtest.Path(result, "content", 1, "type") != "image" || llmtest.Path(result, "content", 1, "source", "media_type") != "image/png" {
		b, _ := json.Marshal(result)
		t.Fatalf("tool result = %s", b)
	}
}

func TestMidStreamOverloadedIsAServerError(t *testing.T) {
	srv := llmtest.Start(t, llmtest.NewReplayHandler(llmtest.Anthropic, llmtest.Canned{Status: 200, ContentType: "text/event-stream", Body: "" +
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"}))
	c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), APIKey: "k", Model: "c"})
	_, _, _, _, err := llmtest.Collect(c.Stream(t.Context(), &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}))
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindServer || e.Code != "overloaded_error" || !e.Retryable() {
		t.Fatalf("err = %#v", err)
	}
}

func TestWebSearchOptions(t *testing.T) {
	tests := []struct {
		name    string
		ws      llm.WebSearch
		wantErr bool
	}{
		{name: "allowed and blocked domains together", ws: llm.WebSearch{AllowedDomains: []string{"go.dev"}, BlockedDomains: []string{"example.com"}}, wantErr: true},
		{name: "negative max uses", ws: llm.WebSearch{MaxUses: -1}, wantErr: true},
		{name: "blocked domains", ws: llm.WebSearch{BlockedDomains: []string{"example.com"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.StartScript(t, llmtest.Anthropic, llmtest.ParseScript(t, `turns: [{text: "ok"}]`))
			c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), Model: "claude-test"})
			_, err := c.Complete(t.Context(), &llm.Request{WebSearch: &tt.ws, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
			if tt.wantErr {
				if llm.KindOf(err) != llm.KindInvalidRequest || len(srv.Requests()) != 0 {
					t.Fatalf("error = %v after %d requests, want an invalid-request error before any request", err, len(srv.Requests()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := llmtest.Path(srv.Requests()[0].Body, "tools", 0, "blocked_domains", 0); got != "example.com" {
				t.Fatalf("tools.0.blocked_domains = %v", got)
			}
		})
	}
}

// TestWebSearchError checks that a failed search (an error in place of the
// results) is reported on the part and still sent back.
func TestWebSearchError(t *testing.T) {
	for _, stream := range []bool{false, true} {
		srv := llmtest.StartScript(t, llmtest.Anthropic, llmtest.ParseScript(t, `
turns:
  - webSearch: {query: "q", error: max_uses_exceeded}
    text: "I could not search."
  - expect: {historyWebSearch: "q"}
    text: "ok"
`))
		c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), Model: "claude-test"})
		req := &llm.Request{WebSearch: &llm.WebSearch{MaxUses: 1}, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
		var resp *llm.Response
		var err error
		if stream {
			resp, _, _, _, err = llmtest.Collect(c.Stream(t.Context(), req))
		} else {
			resp, err = c.Complete(t.Context(), req)
		}
		if err != nil {
			t.Fatal(err)
		}
		ws := resp.WebSearches()
		if len(ws) != 1 || ws[0].Error != "max_uses_exceeded" || len(ws[0].Results) != 0 {
			t.Fatalf("stream %v: web searches %+v, want one failed with max_uses_exceeded", stream, ws)
		}
		req.Messages = append(req.Messages, resp.Message, llm.TextMessage(llm.RoleUser, "and now?"))
		if _, err := c.Complete(t.Context(), req); err != nil {
			t.Fatalf("stream %v: next turn: %v", stream, err)
		}
		if got := llmtest.Path(srv.Requests()[1].Body, "messages", 1, "content", 1, "content", "error_code"); got != "max_uses_exceeded" {
			t.Fatalf("stream %v: the failed search was not sent back: %v", stream, got)
		}
	}
}

// TestPauseTurnIsContinued: a turn the API pauses (stop_reason pause_turn,
// here after a web search) is sent back as it came and continued within
// the same call; the caller gets one answer with both parts.
func TestPauseTurnIsContinued(t *testing.T) {
	for _, stream := range []bool{false, true} {
		srv := llmtest.StartScript(t, llmtest.Anthropic, llmtest.ParseScript(t, `
turns:
  - webSearch: {query: "q", results: [{url: "https://go.dev/", title: "Go"}]}
    pauseTurn: true
    usage: {inputTokens: 100, outputTokens: 10}
  - expect: {historyWebSearch: "q"}
    text: "Found it."
    usage: {inputTokens: 300, outputTokens: 20}
`))
		c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), Model: "claude-test"})
		req := &llm.Request{WebSearch: &llm.WebSearch{}, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "search")}}
		var resp *llm.Response
		var err error
		if stream {
			resp, _, _, _, err = llmtest.Collect(c.Stream(t.Context(), req))
		} else {
			resp, err = c.Complete(t.Context(), req)
		}
		if err != nil {
			t.Fatalf("stream %v: %v", stream, err)
		}
		if len(resp.WebSearches()) != 1 || resp.Text() != "Found it." || resp.FinishReason != llm.FinishStop {
			t.Fatalf("stream %v: searches %+v text %q finish %q", stream, resp.WebSearches(), resp.Text(), resp.FinishReason)
		}
		if resp.Usage.InputTokens != 400 || resp.Usage.OutputTokens != 30 {
			t.Errorf("stream %v: usage %+v, want the sum of both requests", stream, resp.Usage)
		}
		reqs := srv.Requests()
		if len(reqs) != 2 || llmtest.Path(reqs[1].Body, "messages", 1, "role") != "assistant" ||
			llmtest.Path(reqs[1].Body, "messages", 1, "content", 0, "type") != "server_tool_use" {
			t.Fatalf("stream %v: %d requests; the continuation does not send the paused turn back", stream, len(reqs))
		}
	}
}
