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
	// PartWebSearch is one search the provider ran with its own
	// server-side tool (Request.WebSearch): WebSearch holds the queries
	// and the results; Raw holds the provider's blocks or item when it
	// must be sent back on later turns (Anthropic, OpenAI Responses).
	PartWebSearch PartKind = "web_search"
)

// ContentPart is one piece of a Message. Exactly the field matching Kind is
// set (WebSearch for PartWebSearch). A text part may also carry Citations:
// the sources a provider's server-side web search attributed parts of the
// text to. Raw, when non-empty, is the provider's own item for this part (an
// Anthropic thinking block with its signature, an OpenAI reasoning item with
// encrypted content, a Gemini part with its thoughtSignature, Anthropic's
// server_tool_use and web_search_tool_result blocks of one search); the
// adapter for Provider echoes it back verbatim on the next request, and
// other adapters ignore it (they use Text instead). Raw parts must never be
// merged, split or reordered.
type ContentPart struct {
	Kind       PartKind        `json:"kind"`
	Text       string          `json:"text,omitempty"`
	Image      *Image          `json:"image,omitempty"`
	ToolCall   *ToolCall       `json:"toolCall,omitempty"`
	ToolResult *ToolResult     `json:"toolResult,omitempty"`
	WebSearch  *WebSearchCall  `json:"webSearch,omitempty"`
	Citations  []Citation      `json:"citations,omitempty"`
	Provider   string          `json:"provider,omitempty"`
	Raw        json.RawMessage `json:"raw,omitempty"`
}

// WebSearchCall is what one provider-hosted web search did (PartWebSearch).
type WebSearchCall struct {
	// ID is the provider's id of the search (Anthropic server_tool_use id,
	// OpenAI web_search_call id); empty for Gemini.
	ID string `json:"id,omitempty"`
	// Queries are the search queries the model ran.
	Queries []string `json:"queries,omitempty"`
	// Results are the pages the search returned, when the provider says.
	Results []WebSearchResult `json:"results,omitempty"`
	// Error is the provider's error code when the search failed (e.g.
	// Anthropic max_uses_exceeded).
	Error string `json:"error,omitempty"`
}

// WebSearchResult is one page a provider-hosted web search returned.
type WebSearchResult struct {
	URL   string `json:"url"`
	Title string `json:"title,omitempty"`
}

// Citation attributes a span of a text part to a web page found by a
// provider-hosted web search.
type Citation struct {
	URL   string `json:"url"`
	Title string `json:"title,omitempty"`
	// CitedText is the text cited: the source's text (Anthropic) or the
	// span of the answer the source supports (OpenAI, Gemini).
	CitedText string `json:"citedText,omitempty"`
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

// WebSearches returns the provider-hosted web searches of m in order.
func (m Message) WebSearches() []WebSearchCall {
	var out []WebSearchCall
	for _, p := range m.Content {
		if p.Kind == PartWebSearch && p.WebSearch != nil {
			out = append(out, *p.WebSearch)
		}
	}
	return out
}

// Citations returns the citations of m's text parts in order.
func (m Message) Citations() []Citation {
	var out []Citation
	for _, p := range m.Content {
		if p.Kind == PartText {
			out = append(out, p.Citations...)
		}
	}
	return out
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

// WebSearch turns on the provider's own server-side web search tool
// (Anthropic web_search, OpenAI Responses web_search, Gemini Google Search
// grounding). Adapters that cannot honour it, or one of its options, fail
// the request with KindInvalidRequest rather than drop it.
type WebSearch struct {
	// MaxUses caps the searches of one request (0: the provider's
	// default). Only Anthropic has this option.
	MaxUses int `json:"maxUses,omitempty"`
	// AllowedDomains limits results to these domains (Anthropic, OpenAI).
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	// BlockedDomains excludes these domains (Anthropic). At most one of
	// AllowedDomains and BlockedDomains.
	BlockedDomains []string `json:"blockedDomains,omitempty"`
}

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
	// WebSearch, when set, offers the provider's server-side web search.
	WebSearch *WebSearch `json:"webSearch,omitempty"`
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

// WebSearches are the provider-hosted web searches the model ran.
func (r *Response) WebSearches() []WebSearchCall { return r.Message.WebSearches() }

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
	// EventWebSearch reports a provider-hosted web search as the provider
	// streams it (WebSearch: its query, later its results); the finish
	// event's Response has the whole PartWebSearch parts.
	EventWebSearch StreamEventType = "web_search"
	EventFinish    StreamEventType = "finish" // Response is set
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
	// WebSearch is set on EventWebSearch.
	WebSearch *WebSearchCall `json:"webSearch,omitempty"`
	Response  *Response      `json:"response,omitempty"`
}
