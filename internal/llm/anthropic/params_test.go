package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// TestParamsGolden pins the Messages request (body and anthropic-beta) of every
// loop request shape against testdata/params.
func TestParamsGolden(t *testing.T) {
	hello := []llm.Message{
		{Role: llm.RoleSystem, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Be brief."}}},
		{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Hello"}}},
	}
	opts := func(s string) map[string]json.RawMessage {
		return map[string]json.RawMessage{ProviderName: json.RawMessage(s)}
	}
	assistant := func(parts ...llm.ContentPart) []llm.Message {
		return []llm.Message{
			{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "Search"}}},
			{Role: llm.RoleAssistant, Content: parts},
			{Role: llm.RoleUser, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "More"}}},
		}
	}
	raw := func(kind llm.PartKind, s string) llm.ContentPart {
		return llm.ContentPart{Kind: kind, Provider: ProviderName, Raw: json.RawMessage(s)}
	}
	cases := append(llmtest.ParamsCases(),
		llmtest.ParamsCase{Name: "options_beta_headers", Request: llm.Request{Messages: hello, ProviderOptions: opts(`{"beta_headers":["a-2025","b-2026"]}`)}},
		llmtest.ParamsCase{Name: "options_disable_cache", Request: llm.Request{Messages: hello, Tools: []llm.ToolDefinition{llmtest.Weather},
			WebSearch: &llm.WebSearch{MaxUses: 2}, ProviderOptions: opts(`{"disable_cache":true}`)}},
		llmtest.ParamsCase{Name: "raw_thinking", Request: llm.Request{Messages: assistant(
			raw(llm.PartReasoning, `{"type":"thinking","thinking":"hmm","signature":"SIG"}`),
			raw(llm.PartReasoning, `{"type":"redacted_thinking","data":"REDACTED"}`),
			llm.ContentPart{Kind: llm.PartReasoning, Text: "foreign", Provider: "openai", Raw: json.RawMessage(`{}`)},
			llm.ContentPart{Kind: llm.PartText, Text: "Answer."},
		)}},
		llmtest.ParamsCase{Name: "raw_thinking_bad_type", Request: llm.Request{Messages: assistant(raw(llm.PartReasoning, `{"type":"other"}`))}},
		llmtest.ParamsCase{Name: "raw_thinking_bad_json", Request: llm.Request{Messages: assistant(raw(llm.PartReasoning, `[`))}},
		llmtest.ParamsCase{Name: "raw_web_search", Request: llm.Request{WebSearch: &llm.WebSearch{}, Messages: assistant(
			raw(llm.PartWebSearch, `[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://go.dev","title":"Go","encrypted_content":"E"}]}]`),
			llm.ContentPart{Kind: llm.PartWebSearch, Provider: "openai", Raw: json.RawMessage(`{}`)},
			llm.ContentPart{Kind: llm.PartText, Text: "Go is a language."},
		)}},
		llmtest.ParamsCase{Name: "raw_web_search_bad", Request: llm.Request{Messages: assistant(raw(llm.PartWebSearch, `{"type":"x"}`))}},
	)
	llmtest.ParamsTable{Protocol: llmtest.Anthropic, New: newClient, Model: "claude-test",
		Headers: []string{"Anthropic-Beta"}, Cases: cases}.Run(t)
}
