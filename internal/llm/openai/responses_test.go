package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

var secretEnv = []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_ADMIN_KEY", "OPENAI_CUSTOM_HEADERS"}

// newResponses builds the adapter under test for a fake server.
var newResponses = llmtest.Constructor(New, targetConfig)

// targetConfig is the adapter configuration for a test target.
func targetConfig(tg llmtest.Target) Config {
	return Config{APIKey: tg.APIKey, BaseURL: tg.BaseURL, Model: tg.Model, StreamIdleTimeout: tg.StreamIdleTimeout}
}

func TestResponsesSuite(t *testing.T) {
	llmtest.Suite{
		Protocol:       llmtest.OpenAIResponses,
		New:            newResponses,
		SecretEnv:      secretEnv,
		CheckRequest:   checkResponsesRequests,
		CheckCaching:   checkCacheKey,
		WebSearch:      &llm.WebSearch{AllowedDomains: []string{"go.dev", "golang.org"}},
		CheckWebSearch: checkResponsesWebSearch,
	}.Run(t)
}

// checkResponsesWebSearch asserts the web_search tool with its domain
// filter and the sources include on the first request, and the
// web_search_call item and the annotated message sent back on the second.
func checkResponsesWebSearch(t *testing.T, reqs []llmtest.Request) {
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	first := reqs[0].Body
	var tool map[string]any
	for _, x := range first["tools"].([]any) {
		if m := x.(map[string]any); m["type"] == "web_search" {
			tool = m
		}
	}
	if got, _ := json.Marshal(llmtest.Path(tool, "filters", "allowed_domains")); string(got) != `["go.dev","golang.org"]` {
		t.Errorf("web_search tool = %v, want filters.allowed_domains [go.dev golang.org]", tool)
	}
	if got, _ := json.Marshal(first["include"]); string(got) != `["reasoning.encrypted_content","web_search_call.action.sources"]` {
		t.Errorf("include = %s", got)
	}
	input := reqs[1].Body["input"]
	if llmtest.Path(input, 1, "type") != "web_search_call" || llmtest.Path(input, 1, "action", "query") != llmtest.WebSearchQuery {
		t.Errorf("input[1] = %v, want the web_search_call item", llmtest.Path(input, 1))
	}
	if llmtest.Path(input, 2, "content", 0, "annotations", 0, "type") != "url_citation" {
		t.Errorf("input[2] = %v, want the message with its url_citation", llmtest.Path(input, 2))
	}
}

func checkResponsesRequests(t *testing.T, reqs []llmtest.Request) {
	first, second := reqs[0], reqs[1]
	if got := first.Header.Get("Authorization"); got != "Bearer test-key" {
		t.Fatalf("Authorization = %q", got)
	}
	b := first.Body
	if b["store"] != false || llmtest.Path(b, "include", 0) != "reasoning.encrypted_content" || llmtest.Path(b, "reasoning", "effort") != "high" ||
		b["parallel_tool_calls"] != true || b["instructions"] != "You are a helpful assistant." {
		t.Fatalf("first request = %v", b)
	}
	if llmtest.Path(b, "tools", 0, "strict") != false || llmtest.Path(b, "tools", 0, "type") != "function" {
		t.Fatalf("tools = %v", b["tools"])
	}
	in, _ := second.Body["input"].([]any)
	// user, reasoning, message, call_w, call_a (echoed verbatim), two outputs, user.
	types := []string{}
	for _, it := range in {
		typ, _ := llmtest.Path(it, "type").(string)
		if typ == "" {
			typ = "message:" + llmtest.Path(it, "role").(string)
		}
		types = append(types, typ)
	}
	want := []string{"message:user", "reasoning", "message", "function_call", "function_call", "function_call_output", "function_call_output", "message:user"}
	if len(types) != len(want) {
		t.Fatalf("input item types = %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("input item types = %v, want %v", types, want)
		}
	}
	if llmtest.Path(in, 1, "encrypted_content") == "" || llmtest.Path(in, 3, "id") != "fc_call_w" || llmtest.Path(in, 5, "call_id") != "call_w" || llmtest.Path(in, 6, "call_id") != "call_a" {
		b, _ := json.Marshal(in)
		t.Fatalf("input = %s", b)
	}
}

func TestResponsesRecordings(t *testing.T) {
	llmtest.Recording{Protocol: llmtest.OpenAIResponses, New: newResponses, ReasoningRaw: true, Dirs: []string{
		"TestOpenAIResponsesCommon/*", "TestOpenAIResponsesWithSummaryThinking/*"}}.Run(t)
}

func TestResponsesStreamFailureEvents(t *testing.T) {
	created := `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"r","object":"response","created_at":1,"status":"in_progress","model":"m","output":[],"usage":null}}

`
	tests := []struct {
		name       string
		body       string
		wantKind   llm.ErrorKind
		wantFinish llm.FinishReason
	}{
		{"error event", created + `event: error
data: {"type":"error","sequence_number":1,"code":"rate_limit_exceeded","message":"slow down"}

`, llm.KindRateLimit, ""},
		{"response.failed", created + `event: response.failed
data: {"type":"response.failed","sequence_number":1,"response":{"id":"r","object":"response","created_at":1,"status":"failed","model":"m","output":[],"error":{"code":"server_error","message":"boom"}}}

`, llm.KindServer, ""},
		{"response.incomplete keeps the partial output", created + `event: response.incomplete
data: {"type":"response.incomplete","sequence_number":1,"response":{"id":"r","object":"response","created_at":1,"status":"incomplete","model":"m","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","id":"msg","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"partial","annotations":[]}]}],"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":0},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":14}}}

`, "", llm.FinishLength},
		{"stream cut before completion", created, llm.KindNetwork, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.Start(t, llmtest.NewReplayHandler(llmtest.OpenAIResponses, llmtest.Canned{Status: 200, ContentType: "text/event-stream", Body: tt.body}))
			c := newResponses(t, llmtest.Target{BaseURL: srv.BaseURL(), APIKey: "k", Model: "m"})
			resp, _, _, _, err := llmtest.Collect(c.Stream(t.Context(), &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}))
			if tt.wantKind != "" {
				if llm.KindOf(err) != tt.wantKind {
					t.Fatalf("err = %v, want kind %s", err, tt.wantKind)
				}
				return
			}
			if err != nil || resp.FinishReason != tt.wantFinish || resp.Text() != "partial" {
				t.Fatalf("resp %+v err %v", resp, err)
			}
		})
	}
}

func TestResponsesWebSearchOptionsRejected(t *testing.T) {
	c, err := New(Config{Model: "gpt-test"})
	if err != nil {
		t.Fatal(err)
	}
	for name, ws := range map[string]*llm.WebSearch{
		"max uses":        {MaxUses: 3},
		"blocked domains": {BlockedDomains: []string{"example.com"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Complete(t.Context(), &llm.Request{WebSearch: ws, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
			if llm.KindOf(err) != llm.KindInvalidRequest || !strings.Contains(err.Error(), "web search") {
				t.Fatalf("error = %v, want an invalid-request error about web search", err)
			}
		})
	}
}
