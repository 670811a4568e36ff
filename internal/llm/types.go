package llm

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
)

// Client is the unified LLM client. Complete makes one request and returns the
// whole response; Stream makes one request and yields events as they arrive,
// ending with exactly one EventFinish that carries the assembled Response.
// Implementations retry transient failures themselves (see RetryPolicy) and
// stop at once when ctx is cancelled.
type Client interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
	Stream(ctx context.Context, req *Request) iter.Seq2[StreamEvent, error]
}

// Role is the author of a Message.
type Role string

// Roles. Tool results travel in RoleTool messages; adapters place them where
// each provider requires (Anthropic: tool_result blocks first in the next user
// message; Gemini: functionResponse parts in one user content).
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// PartKind says which field of a ContentPart is set.
type PartKind string

// Content part kinds.
const (
	PartText       PartKind = "text"
	PartImage      PartKind = "image"
	PartToolCall   PartKind = "tool_call"
	PartToolResult PartKind = "tool_result"
	PartReasoning  PartKind = "reasoning"
)

// ContentPart is one piece of a Message. Exactly the field matching Kind is
// set. Raw, when non-empty, is the provider's own item for this part (an
// Anthropic thinking block with its signature, an OpenAI reasoning item with
// encrypted content, a Gemini part with its thoughtSignature); the adapter for
// Provider echoes it back verbatim on the next request, and other adapters
// ignore it (they use Text instead). Raw parts must never be merged, split or
// reordered.
type ContentPart struct {
	Kind       PartKind        `json:"kind"`
	Text       string          `json:"text,omitempty"`
	Image      *Image          `json:"image,omitempty"`
	ToolCall   *ToolCall       `json:"toolCall,omitempty"`
	ToolResult *ToolResult     `json:"toolResult,omitempty"`
	Provider   string          `json:"provider,omitempty"`
	Raw        json.RawMessage `json:"raw,omitempty"`
}

// Image is inline image data.
type Image struct {
	MediaType string `json:"mediaType"` // e.g. image/png
	Data      []byte `json:"data"`
}

// Message is one entry of the conversation sent to the model.
type Message struct {
	Role    Role          `json:"role"`
	Content []ContentPart `json:"content"`
}

// Text joins the text parts of m.
func (m Message) Text() string {
	var b strings.Builder
	for _, p := range m.Content {
		if p.Kind == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// ToolCalls returns the tool calls of m in order.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, p := range m.Content {
		if p.Kind == PartToolCall && p.ToolCall != nil {
			calls = append(calls, *p.ToolCall)
		}
	}
	return calls
}

// Reasoning joins the reasoning text of m (summaries or thinking text).
func (m Message) Reasoning() string {
	var b strings.Builder
	for _, p := range m.Content {
		if p.Kind == PartReasoning {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// TextMessage builds a message with a single text part.
func TextMessage(role Role, text string) Message {
	return Message{Role: role, Content: []ContentPart{{Kind: PartText, Text: text}}}
}

// ToolDefinition describes a tool to the model. Parameters is a JSON Schema
// whose root is an object.
type ToolDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ToolCall is a tool invocation requested by the model. Arguments is the raw
// JSON the model produced; it may be invalid and is validated by the loop.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult answers one ToolCall.
type ToolResult struct {
	CallID  string  `json:"callId"`
	Name    string  `json:"name,omitempty"`
	Content string  `json:"content"`
	IsError bool    `json:"isError,omitempty"`
	Images  []Image `json:"images,omitempty"`
}

// ToolChoice controls whether the model may or must call tools.
type ToolChoice string

// Tool choices.
const (
	ToolChoiceAuto     ToolChoice = "auto"
	ToolChoiceNone     ToolChoice = "none"
	ToolChoiceRequired ToolChoice = "required"
)

// Request is one model call. System text is carried as RoleSystem messages
// (normally one, first); adapters move it where the provider wants it.
type Request struct {
	Model             string           `json:"model"`
	Messages          []Message        `json:"messages"`
	Tools             []ToolDefinition `json:"tools,omitempty"`
	ToolChoice        ToolChoice       `json:"toolChoice,omitempty"`
	ReasoningEffort   string           `json:"reasoningEffort,omitempty"` // "", low, medium, high, or a provider-specific value passed through
	MaxOutputTokens   int              `json:"maxOutputTokens,omitempty"`
	ParallelToolCalls *bool            `json:"parallelToolCalls,omitempty"`
	// CacheKey is a stable key for requests that share a prompt prefix (the
	// session id): OpenAI adapters send it as prompt_cache_key so the
	// requests of one session reach the same prompt cache. Others ignore it.
	CacheKey string `json:"cacheKey,omitempty"`
	// ProviderOptions holds per-provider settings keyed by provider name
	// ("anthropic": {"beta_headers": [...]}, "gemini": {"safety_settings": [...]},
	// "openai": {"store": true}). Adapters read only their own key.
	ProviderOptions map[string]json.RawMessage `json:"providerOptions,omitempty"`
}

// FinishReason is the normalised reason the model stopped.
type FinishReason string

// Finish reasons.
const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter"
	FinishError         FinishReason = "error"
	FinishOther         FinishReason = "other"
)

// Usage is normalised token accounting. InputTokens includes cached input
// (cache reads and writes); OutputTokens includes reasoning tokens.
type Usage struct {
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens,omitempty"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
}

// Total is input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + o.InputTokens,
		OutputTokens:     u.OutputTokens + o.OutputTokens,
		ReasoningTokens:  u.ReasoningTokens + o.ReasoningTokens,
		CacheReadTokens:  u.CacheReadTokens + o.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + o.CacheWriteTokens,
	}
}

// Response is the model's answer to one Request. Message has RoleAssistant
// and holds text, reasoning and tool-call parts in the provider's order.
type Response struct {
	ID           string       `json:"id,omitempty"`
	Model        string       `json:"model,omitempty"`
	Message      Message      `json:"message"`
	FinishReason FinishReason `json:"finishReason"`
	Usage        Usage        `json:"usage"`
}

// Text is the response's text output.
func (r *Response) Text() string { return r.Message.Text() }

// ToolCalls are the tool calls the model requested.
func (r *Response) ToolCalls() []ToolCall { return r.Message.ToolCalls() }

// Reasoning is the reasoning text, if the provider returned any.
func (r *Response) Reasoning() string { return r.Message.Reasoning() }

// StreamEventType is the kind of a StreamEvent.
type StreamEventType string

// Stream event types. A stream yields any number of deltas and tool-call
// events, then exactly one EventFinish with the assembled Response.
const (
	EventTextDelta      StreamEventType = "text_delta"
	EventReasoningDelta StreamEventType = "reasoning_delta"
	EventToolCallStart  StreamEventType = "tool_call_start" // ToolCall has ID and Name
	EventToolCallDelta  StreamEventType = "tool_call_delta" // Delta is an arguments fragment for ToolCall.ID
	EventToolCallEnd    StreamEventType = "tool_call_end"   // ToolCall is complete
	EventFinish         StreamEventType = "finish"          // Response is set
	// EventRestart says that the events yielded so far belong to an attempt
	// that failed after it had started streaming (WithRetry): the consumer
	// discards them, and a new attempt's events follow.
	EventRestart StreamEventType = "restart"
)

// StreamEvent is one event of a streamed response.
type StreamEvent struct {
	Type     StreamEventType `json:"type"`
	Delta    string          `json:"delta,omitempty"`
	ToolCall *ToolCall       `json:"toolCall,omitempty"`
	Response *Response       `json:"response,omitempty"`
}
