package openai

import (
	"encoding/json"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// newCompat builds the adapter under test for a fake server.
var newCompat = llmtest.Constructor(NewCompat, targetConfig)

func TestCompatSuite(t *testing.T) {
	llmtest.Suite{
		Protocol:     llmtest.ChatCompletions,
		New:          newCompat,
		SecretEnv:    secretEnv,
		CheckRequest: checkChatRequests,
		CheckCaching: checkCacheKey,
	}.Run(t)
}

func checkChatRequests(t *testing.T, reqs []llmtest.Request) {
	first, second := reqs[0], reqs[1]
	if got := first.Header.Get("Authorization"); got != "Bearer test-key" {
		t.Fatalf("Authorization = %q", got)
	}
	if first.Body["reasoning_effort"] != "high" || first.Body["parallel_tool_calls"] != true || llmtest.Path(first.Body, "tools", 0, "function", "strict") != false {
		t.Fatalf("first request = %v", first.Body)
	}
	if first.Body["stream"] == true && llmtest.Path(first.Body, "stream_options", "include_usage") != true {
		t.Fatalf("stream_options = %v", first.Body["stream_options"])
	}
	msgs := second.Body["messages"].([]any)
	roles := ""
	for _, m := range msgs {
		roles += llmtest.Path(m, "role").(string) + " "
	}
	if roles != "system user assistant tool tool user " || llmtest.Path(msgs, 3, "tool_call_id") != "call_w" || llmtest.Path(msgs, 4, "tool_call_id") != "call_a" {
		b, _ := json.Marshal(msgs)
		t.Fatalf("messages = %s", b)
	}
	if _, ok := llmtest.Path(msgs, 2).(map[string]any)["reasoning_content"]; ok {
		t.Fatal("reasoning_content was sent back")
	}
}

func TestCompatGeneratesMissingToolCallIDs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		h := llmtest.NewHandler(llmtest.ChatCompletions, llmtest.ParseScript(t, `
turns:
  - toolCalls: [{name: weather, arguments: {location: A}}, {name: add, arguments: {a: 1, b: 2}}]
  - expect: {lastToolResultContains: "3"}
    text: done
`))
		h.OmitCallIDs = true
		srv := llmtest.Start(t, h)
		c := newCompat(t, llmtest.Target{BaseURL: srv.BaseURL(), Model: "qwen"})
		req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "go")}, Tools: []llm.ToolDefinition{llmtest.Weather, llmtest.Add}}
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
		calls := resp.ToolCalls()
		if len(calls) != 2 || calls[0].ID == "" || calls[0].ID == calls[1].ID || calls[1].Name != "add" || string(calls[1].Arguments) != `{"a":1,"b":2}` {
			t.Fatalf("stream=%v calls = %+v", stream, calls)
		}
		req.Messages = append(req.Messages, resp.Message, llm.Message{Role: llm.RoleTool, Content: []llm.ContentPart{
			{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[0].ID, Content: "sun"}},
			{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[1].ID, Content: "3"}}}})
		if _, err := c.Complete(t.Context(), req); err != nil {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		if auth := srv.Requests()[0].Header.Get("Authorization"); auth != "" {
			t.Fatalf("no key configured, but Authorization = %q", auth)
		}
	}
}

func TestCompatRecordings(t *testing.T) {
	llmtest.Recording{Protocol: llmtest.ChatCompletions, New: newCompat, Dirs: []string{
		"TestOpenAICommon/*", "TestOpenAICompatibleCommon/*", "TestOpenAICompatibleThinking/*"}}.Run(t)
}
