package llmtest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// update rewrites the golden files of ParamsTable instead of comparing.
var update = flag.Bool("update", false, "rewrite the llmtest ParamsTable golden files")

// ParamsCase is one request of a ParamsTable.
type ParamsCase struct {
	// Name names the case and its golden file (<Dir>/<Name>.golden).
	Name    string
	Request llm.Request
	// Stream sends the request with Stream instead of Complete.
	Stream bool
	// NoModel builds the adapter without a default model.
	NoModel bool
}

// ParamsTable pins the request an adapter sends for each of its cases:
// the method, path and query, the listed headers and the JSON body, byte
// for byte, against a golden file. A case the adapter refuses before
// sending pins its error instead. Run the test with -update to rewrite the
// golden files.
type ParamsTable struct {
	Protocol Protocol
	// New builds the adapter under test.
	New func(t *testing.T, target Target) llm.Client
	// Model is the Target model (the adapter's default).
	Model string
	// Headers are the request headers pinned with the body.
	Headers []string
	// Dir holds the golden files (testdata/params when empty).
	Dir   string
	Cases []ParamsCase
}

// Run runs every case as a subtest.
func (pt ParamsTable) Run(t *testing.T) {
	dir := pt.Dir
	if dir == "" {
		dir = filepath.Join("testdata", "params")
	}
	for _, tc := range pt.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			got := pt.capture(t, tc)
			path := filepath.Join(dir, tc.Name+".golden")
			if *update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("request differs from %s\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
			}
		})
	}
}

// capture sends tc's request to a server that records it and answers 400,
// and renders what was sent (or the adapter's error when nothing was).
func (pt ParamsTable) capture(t *testing.T, tc ParamsCase) []byte {
	t.Helper()
	h := NewReplayHandler(pt.Protocol, Canned{Status: 400, ContentType: "application/json",
		Body: `{"error":{"type":"invalid_request_error","message":"llmtest: params capture"}}`})
	srv := Start(t, h)
	tg := Target{BaseURL: srv.BaseURL(), APIKey: "params-key", Model: pt.Model}
	if tc.NoModel {
		tg.Model = ""
	}
	c := pt.New(t, tg)
	req := tc.Request
	var callErr error
	if tc.Stream {
		for _, err := range c.Stream(t.Context(), &req) {
			if err != nil {
				callErr = err
				break
			}
		}
	} else {
		_, callErr = c.Complete(t.Context(), &req)
	}
	reqs := h.Requests()
	switch len(reqs) {
	case 0:
		if callErr == nil {
			t.Fatal("no request sent and no error")
		}
		return fmt.Appendf(nil, "error: %v\n", callErr)
	case 1:
	default:
		t.Fatalf("%d requests sent, want 1", len(reqs))
	}
	return render(t, reqs[0], pt.Headers)
}

// render writes the request line, the headers and the indented body. The
// body is checked to be compact JSON (and its trailing newlines are
// counted), so comparing the rendered form compares the bytes sent.
func render(t *testing.T, r Request, headers []string) []byte {
	t.Helper()
	var b bytes.Buffer
	target := r.Path
	if r.RawQuery != "" {
		target += "?" + r.RawQuery
	}
	fmt.Fprintf(&b, "%s %s\n", r.Method, target)
	for _, name := range headers {
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(r.Header.Values(name), ", "))
	}
	b.WriteString("\n")
	body := bytes.TrimRight(r.RawBody, "\n")
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.RawBody)
	}
	if !bytes.Equal(compact.Bytes(), body) {
		t.Fatalf("body is not compact JSON:\n%s", r.RawBody)
	}
	if err := json.Indent(&b, body, "", "  "); err != nil {
		t.Fatalf("indent body: %v", err)
	}
	b.WriteString("\n")
	if n := len(r.RawBody) - len(body); n > 0 {
		fmt.Fprintf(&b, "(body ends with %d newline(s))\n", n)
	}
	return b.Bytes()
}

// ParamsCases are the loop requests every adapter's ParamsTable covers:
// system prompts, text, images, tool calls and results (errors, images,
// unanswered calls), tools and tool choice, reasoning effort, output
// limits, cache keys and web search. Adapters add their own cases
// (provider options, their raw parts) to these.
func ParamsCases() []ParamsCase {
	text := func(role llm.Role, s string) llm.Message {
		return llm.Message{Role: role, Content: []llm.ContentPart{{Kind: llm.PartText, Text: s}}}
	}
	call := func(id, name, args string) llm.ContentPart {
		return llm.ContentPart{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}}
	}
	result := func(id, content string, isError bool, images ...llm.Image) llm.ContentPart {
		return llm.ContentPart{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: id, Content: content, IsError: isError, Images: images}}
	}
	png := llm.Image{MediaType: "image/png", Data: []byte("\x89PNG\r\n\x1a\nfake")}
	jpeg := llm.Image{MediaType: "image/jpeg", Data: []byte("\xff\xd8\xfffake")}
	bare := llm.ToolDefinition{Name: "now"} // no description, no parameters
	hello := []llm.Message{text(llm.RoleSystem, "You are terse."), text(llm.RoleUser, "Hello")}
	no := false
	round := []llm.Message{
		text(llm.RoleSystem, "You are terse."),
		text(llm.RoleUser, "Weather in Florence, and 2+3?"),
		{Role: llm.RoleAssistant, Content: []llm.ContentPart{
			{Kind: llm.PartReasoning, Text: "foreign reasoning"},
			{Kind: llm.PartText, Text: "Checking."},
			call("call_w", "weather", `{"location":"Florence"}`),
			call("call_a", "add", `{"a":2,"b":3}`),
		}},
		{Role: llm.RoleTool, Content: []llm.ContentPart{result("call_w", "sunny, 24C", false)}},
		{Role: llm.RoleTool, Content: []llm.ContentPart{result("call_a", "add: b: not a number", true)}},
		text(llm.RoleUser, "Thanks."),
	}
	return []ParamsCase{
		{Name: "text", Request: llm.Request{Messages: hello}},
		{Name: "text_stream", Stream: true, Request: llm.Request{Messages: hello}},
		{Name: "no_model", NoModel: true, Request: llm.Request{Messages: hello}},
		{Name: "model_and_max_tokens", Request: llm.Request{Model: "other-model", MaxOutputTokens: 777, Messages: hello}},
		{Name: "systems", Request: llm.Request{Messages: []llm.Message{
			text(llm.RoleSystem, "First."), text(llm.RoleSystem, ""), text(llm.RoleUser, "Hi"),
			text(llm.RoleSystem, "Later."), text(llm.RoleUser, "Again"),
		}}},
		{Name: "user_parts", Request: llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentPart{
			{Kind: llm.PartText, Text: "one "}, {Kind: llm.PartText, Text: ""}, {Kind: llm.PartText, Text: "two"},
			{Kind: llm.PartImage}, {Kind: llm.PartToolResult},
		}}}}},
		{Name: "user_image", Request: llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentPart{
			{Kind: llm.PartText, Text: "What is this?"}, {Kind: llm.PartImage, Image: &png},
		}}}}},
		{Name: "tool_round", Request: llm.Request{Messages: round, Tools: []llm.ToolDefinition{Weather, Add, bare}}},
		{Name: "tool_round_stream", Stream: true, Request: llm.Request{Messages: round, Tools: []llm.ToolDefinition{Weather, Add}}},
		{Name: "unanswered_call", Request: llm.Request{Tools: []llm.ToolDefinition{Weather, Add}, Messages: []llm.Message{
			text(llm.RoleUser, "Go"),
			{Role: llm.RoleAssistant, Content: []llm.ContentPart{call("call_w", "weather", `{"location":"Rome"}`), call("call_a", "add", ``)}},
			{Role: llm.RoleTool, Content: []llm.ContentPart{result("call_a", "5", false)}},
			text(llm.RoleUser, "Next"),
			{Role: llm.RoleAssistant, Content: []llm.ContentPart{call("call_x", "weather", `not json`)}},
			text(llm.RoleUser, "Stop"),
		}}},
		{Name: "assistant_edges", Request: llm.Request{Messages: []llm.Message{
			text(llm.RoleUser, "A"),
			{Role: llm.RoleAssistant},
			text(llm.RoleUser, "B"),
			{Role: llm.RoleAssistant, Content: []llm.ContentPart{{Kind: llm.PartText}, {Kind: llm.PartToolCall}}},
			text(llm.RoleUser, "C"),
			text(llm.RoleAssistant, "Done."),
		}}},
		{Name: "tool_result_images", Request: llm.Request{Tools: []llm.ToolDefinition{Weather}, Messages: []llm.Message{
			text(llm.RoleUser, "Show me"),
			{Role: llm.RoleAssistant, Content: []llm.ContentPart{call("c1", "weather", `{}`), call("c2", "weather", `{}`), call("c3", "weather", `{}`)}},
			{Role: llm.RoleTool, Content: []llm.ContentPart{
				result("c1", "two pictures", false, png, jpeg),
				result("c2", "", false, png),
				result("c3", "", false),
			}},
			{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "And this"}, {Kind: llm.PartImage, Image: &jpeg}}},
		}}},
		{Name: "tool_choice_none", Request: llm.Request{Messages: hello, Tools: []llm.ToolDefinition{Weather}, ToolChoice: llm.ToolChoiceNone}},
		{Name: "tool_choice_required", Request: llm.Request{Messages: hello, Tools: []llm.ToolDefinition{Weather}, ToolChoice: llm.ToolChoiceRequired}},
		{Name: "tool_choice_auto_serial", Request: llm.Request{Messages: hello, Tools: []llm.ToolDefinition{Weather}, ToolChoice: llm.ToolChoiceAuto, ParallelToolCalls: &no}},
		{Name: "tool_choice_without_tools", Request: llm.Request{Messages: hello, ToolChoice: llm.ToolChoiceRequired}},
		{Name: "bad_tool_schema", Request: llm.Request{Messages: hello, Tools: []llm.ToolDefinition{{Name: "broken", Parameters: json.RawMessage(`{"type":`)}}}},
		{Name: "reasoning_low", Request: llm.Request{Messages: hello, ReasoningEffort: "LOW"}},
		{Name: "reasoning_high_small_max", Request: llm.Request{Messages: hello, ReasoningEffort: "high", MaxOutputTokens: 1000}},
		{Name: "reasoning_minimal_mid_max", Request: llm.Request{Messages: hello, ReasoningEffort: "minimal", MaxOutputTokens: 1500}},
		{Name: "reasoning_none", Request: llm.Request{Messages: hello, ReasoningEffort: "none"}},
		{Name: "reasoning_adaptive", Request: llm.Request{Messages: hello, ReasoningEffort: "adaptive"}},
		{Name: "reasoning_unknown_mixed_case", Request: llm.Request{Messages: hello, ReasoningEffort: "Ultra"}},
		{Name: "reasoning_xhigh", Request: llm.Request{Messages: hello, ReasoningEffort: "xhigh"}},
		{Name: "reasoning_required_tools", Request: llm.Request{Messages: hello, ReasoningEffort: "medium",
			Tools: []llm.ToolDefinition{Weather}, ToolChoice: llm.ToolChoiceRequired, ParallelToolCalls: &no}},
		{Name: "cache_key", Request: llm.Request{Messages: hello, CacheKey: CacheKey}},
		{Name: "web_search", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{}}},
		{Name: "web_search_tools", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{}, Tools: []llm.ToolDefinition{Weather}}},
		{Name: "web_search_allowed", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{AllowedDomains: []string{"go.dev"}}}},
		{Name: "web_search_blocked", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{BlockedDomains: []string{"example.com"}}}},
		{Name: "web_search_both_domains", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{AllowedDomains: []string{"go.dev"}, BlockedDomains: []string{"example.com"}}}},
		{Name: "web_search_max_uses", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{MaxUses: 3}}},
		{Name: "web_search_negative_uses", Request: llm.Request{Messages: hello, WebSearch: &llm.WebSearch{MaxUses: -1}}},
		{Name: "bad_provider_options", Request: llm.Request{Messages: hello, ProviderOptions: map[string]json.RawMessage{
			"openai": json.RawMessage(`[1]`), "openai-compatible": json.RawMessage(`[1]`), "anthropic": json.RawMessage(`[1]`), "gemini": json.RawMessage(`[1]`),
		}}},
	}
}
