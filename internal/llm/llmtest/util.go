package llmtest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agent-operator/agent-operator/internal/llm"
)

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func obj(m map[string]any, k string) map[string]any {
	o, _ := m[k].(map[string]any)
	return o
}

func arr(m map[string]any, k string) []any {
	a, _ := m[k].([]any)
	return a
}

// strs reads a list of strings.
func strs(m map[string]any, k string) []string {
	var out []string
	for _, x := range arr(m, k) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

// textOf joins a content value: a string, or blocks with "text".
func textOf(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, x := range c {
			if m, ok := x.(map[string]any); ok {
				b.WriteString(str(m, "text"))
			}
		}
		return b.String()
	}
	return ""
}

// argsObject parses tool-call arguments into a JSON object value.
func argsObject(raw json.RawMessage) any {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return map[string]any{}
	}
	return v
}

func argsString(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	return string(raw)
}

// splitArgs cuts raw arguments into two fragments.
func splitArgs(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}

// builder assembles llm messages, merging consecutive parts of one role.
type builder struct {
	msgs []llm.Message
}

func (b *builder) add(role llm.Role, p llm.ContentPart) {
	if n := len(b.msgs); n > 0 && b.msgs[n-1].Role == role {
		b.msgs[n-1].Content = append(b.msgs[n-1].Content, p)
		return
	}
	b.msgs = append(b.msgs, llm.Message{Role: role, Content: []llm.ContentPart{p}})
}

// cut ends the current message so the next part starts a new one.
func (b *builder) cut() {
	b.msgs = append(b.msgs, llm.Message{})
}

func (b *builder) messages() []llm.Message {
	var out []llm.Message
	for _, m := range b.msgs {
		if m.Role != "" {
			out = append(out, m)
		}
	}
	return out
}

func text(s string) llm.ContentPart { return llm.ContentPart{Kind: llm.PartText, Text: s} }

func toolResult(id, content string, isErr bool) llm.ContentPart {
	return llm.ContentPart{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: id, Content: content, IsError: isErr}}
}

func toolCall(id, name string, args json.RawMessage) llm.ContentPart {
	return llm.ContentPart{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: id, Name: name, Arguments: args}}
}

func jsonString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// Effort budgets the fake servers translate back into a reasoning effort
// for Expect.ReasoningEffort. They match the adapters' tables (tested
// there): Anthropic low 2048, medium 8192, high 24576; Gemini 2.5 low 1024,
// medium 8192, high 24576.
func effortFromBudget(budget float64, low, medium float64) string {
	switch {
	case budget <= 0:
		return ""
	case budget <= low:
		return "low"
	case budget <= medium:
		return "medium"
	}
	return "high"
}
