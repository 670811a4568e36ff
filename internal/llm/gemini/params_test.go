package gemini

import (
	"encoding/json"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// TestParamsGolden pins the generateContent request (model path and body) of
// every loop request shape against testdata/params.
func TestParamsGolden(t *testing.T) {
	hello := []llm.Message{{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Hello"}}}}
	opts := func(s string) map[string]json.RawMessage {
		return map[string]json.RawMessage{ProviderName: json.RawMessage(s)}
	}
	raw := func(kind llm.PartKind, s string, tc *llm.ToolCall) llm.ContentPart {
		return llm.ContentPart{Kind: kind, Provider: ProviderName, Raw: json.RawMessage(s), ToolCall: tc}
	}
	weather := func(id string) *llm.ToolCall {
		return &llm.ToolCall{ID: id, Name: "weather", Arguments: json.RawMessage(`{"location":"Oslo"}`)}
	}
	result := func(id, content string, isError bool) llm.ContentPart {
		return llm.ContentPart{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: id, Content: content, IsError: isError}}
	}
	rawCalls := []llm.Message{
		{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Weather?"}}},
		{Role: llm.RoleAssistant, Content: []llm.ContentPart{
			raw(llm.PartReasoning, `{"text":"thinking","thought":true}`, nil),
			raw(llm.PartToolCall, `{"functionCall":{"id":"g1","name":"weather","args":{"location":"Oslo"}},"thoughtSignature":"U0lH"}`, weather("g1")),
			raw(llm.PartToolCall, `{"functionCall":{"name":"weather","args":{"location":"Oslo"}}}`, weather("gen_2")),
			{Kind: llm.PartToolCall, ToolCall: weather("foreign_3")},
		}},
		{Role: llm.RoleTool, Content: []llm.ContentPart{result("g1", "rain", false), result("gen_2", "no data", true), result("foreign_3", "sun", false)}},
	}
	cases := append(llmtest.ParamsCases(),
		llmtest.ParamsCase{Name: "raw_parts", Request: llm.Request{Messages: rawCalls, Tools: []llm.ToolDefinition{llmtest.Weather}}},
		llmtest.ParamsCase{Name: "raw_part_bad", Request: llm.Request{Messages: []llm.Message{
			{Role: llm.RoleAssistant, Content: []llm.ContentPart{raw(llm.PartText, `[`, nil)}}}}},
		llmtest.ParamsCase{Name: "options_safety", Request: llm.Request{Messages: hello,
			ProviderOptions: opts(`{"safety_settings":[{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","threshold":"BLOCK_NONE"}]}`)}},
		llmtest.ParamsCase{Name: "level_model", Request: llm.Request{Model: "models/gemini-3-pro", Messages: hello, ReasoningEffort: "high"}},
		llmtest.ParamsCase{Name: "level_model_passthrough", Request: llm.Request{Model: "gemini-3-pro", Messages: hello, ReasoningEffort: "ultra"}},
		llmtest.ParamsCase{Name: "options_thinking_budget_forced", Request: llm.Request{Model: "gemini-3-pro", Messages: hello, ReasoningEffort: "low",
			ProviderOptions: opts(`{"thinking":"budget"}`)}},
		llmtest.ParamsCase{Name: "options_thinking_level_forced", Request: llm.Request{Messages: hello, ReasoningEffort: "low",
			ProviderOptions: opts(`{"thinking":"level"}`)}},
		llmtest.ParamsCase{Name: "options_thinking_budget_override", Request: llm.Request{Messages: hello, ReasoningEffort: "ultra",
			ProviderOptions: opts(`{"thinking_budget":4096}`)}},
	)
	llmtest.ParamsTable{Protocol: llmtest.Gemini, New: newClient, Model: "gemini-2.5-flash", Cases: cases}.Run(t)
}
