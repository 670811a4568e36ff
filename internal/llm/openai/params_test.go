package openai

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// TestResponsesParams pins the Responses request body of every loop
// request shape against testdata/params/responses.
func TestResponsesParams(t *testing.T) {
	hello := []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Hello"}}}}
	raw := func(kind llm.PartKind, s string, tc *llm.ToolCall) llm.ContentPart {
		return llm.ContentPart{Kind: kind, Provider: ProviderName, Raw: json.RawMessage(s), ToolCall: tc}
	}
	items := []llm.Message{
		{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Weather?"}}},
		{Role: llm.RoleAssistant, Content: []llm.ContentPart{
			raw(llm.PartReasoning, `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}],"encrypted_content":"ENC"}`, nil),
			raw(llm.PartReasoning, `{"type":"reasoning","id":"rs_2","summary":[]}`, nil),
			raw(llm.PartText, `{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[]}]}`, nil),
			raw(llm.PartToolCall, `{"type":"function_call","id":"fc_1","call_id":"call_r","name":"weather","arguments":"{\"location\":\"Oslo\"}"}`,
				&llm.ToolCall{ID: "call_r", Name: "weather", Arguments: json.RawMessage(`{"location":"Oslo"}`)}),
			raw(llm.PartToolCall, `{"type":"function_call","id":"fc_2","call_id":"call_s","name":"weather","arguments":"{}"}`,
				&llm.ToolCall{ID: "call_s", Name: "weather", Arguments: json.RawMessage(`{}`)}),
		}},
		{Role: llm.RoleTool, Content: []llm.ContentPart{{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: "call_r", Content: "rain"}}}},
		{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Thanks"}}},
	}
	opts := func(s string) map[string]json.RawMessage {
		return map[string]json.RawMessage{ProviderName: json.RawMessage(s)}
	}
	cases := append(llmtest.ParamsCases(),
		llmtest.ParamsCase{Name: "raw_items", Request: llm.Request{Messages: items, Tools: []llm.ToolDefinition{llmtest.Weather}}},
		llmtest.ParamsCase{Name: "raw_items_store", Request: llm.Request{Messages: items, Tools: []llm.ToolDefinition{llmtest.Weather}, ProviderOptions: opts(`{"store":true}`)}},
		llmtest.ParamsCase{Name: "options_summary_none", Request: llm.Request{Messages: hello, ReasoningEffort: "high", ProviderOptions: opts(`{"reasoning_summary":"none"}`)}},
		llmtest.ParamsCase{Name: "options_summary_detailed", Request: llm.Request{Messages: hello, ReasoningEffort: "medium", ProviderOptions: opts(`{"reasoning_summary":"detailed"}`)}},
		llmtest.ParamsCase{Name: "options_strict", Request: llm.Request{Messages: hello, Tools: []llm.ToolDefinition{llmtest.Weather}, ProviderOptions: opts(`{"strict":true}`)}},
		llmtest.ParamsCase{Name: "options_prompt_cache_key", Request: llm.Request{Messages: hello, CacheKey: "ignored", ProviderOptions: opts(`{"prompt_cache_key":"chosen"}`)}},
	)
	llmtest.ParamsTable{Protocol: llmtest.OpenAIResponses, New: newResponses, Model: "gpt-test",
		Dir: filepath.Join("testdata", "params", "responses"), Cases: cases}.Run(t)
}

// TestChatParams pins the Chat Completions request body of every loop
// request shape against testdata/params/chat.
func TestChatParams(t *testing.T) {
	hello := []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Hello"}}}}
	opts := func(s string) map[string]json.RawMessage {
		return map[string]json.RawMessage{CompatProviderName: json.RawMessage(s)}
	}
	tools := []llm.ToolDefinition{llmtest.Weather}
	cases := append(llmtest.ParamsCases(),
		llmtest.ParamsCase{Name: "options_strict", Request: llm.Request{Messages: hello, Tools: tools, ProviderOptions: opts(`{"strict":true}`)}},
		llmtest.ParamsCase{Name: "options_no_parallel", Request: llm.Request{Messages: hello, Tools: tools, ToolChoice: llm.ToolChoiceAuto, ProviderOptions: opts(`{"no_parallel_tool_calls":true}`)}},
		llmtest.ParamsCase{Name: "options_no_prompt_cache_key", Request: llm.Request{Messages: hello, CacheKey: "dropped", ProviderOptions: opts(`{"no_prompt_cache_key":true}`)}},
	)
	llmtest.ParamsTable{Protocol: llmtest.ChatCompletions, New: newCompat, Model: "chat-test",
		Dir: filepath.Join("testdata", "params", "chat"), Cases: cases}.Run(t)
}
