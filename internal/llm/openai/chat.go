package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sort"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/internal/httpx"
)

// CompatProviderName is the provider name of CompatClient.
const CompatProviderName = "openai-compatible"

// CompatOptions are the Request.ProviderOptions["openai-compatible"]
// settings.
type CompatOptions struct {
	// Strict sets strict on every function tool (default false, set
	// explicitly).
	Strict bool `json:"strict,omitempty"`
	// NoParallelToolCalls leaves parallel_tool_calls out of the request,
	// for servers that reject the field.
	NoParallelToolCalls bool `json:"no_parallel_tool_calls,omitempty"`
	// NoPromptCacheKey leaves prompt_cache_key (Request.CacheKey) out of
	// the request, for servers that reject the field.
	NoPromptCacheKey bool `json:"no_prompt_cache_key,omitempty"`
}

// CompatClient is the Chat Completions adapter for OpenAI-compatible
// servers. It is safe for concurrent use.
type CompatClient struct {
	cfg  Config
	chat sdk.ChatCompletionService
}

// NewCompat returns a Chat Completions client for cfg. BaseURL should be
// the server's OpenAI base including /v1 (e.g. http://vllm:8000/v1); an
// empty APIKey sends no Authorization header.
func NewCompat(cfg Config) (*CompatClient, error) {
	cfg.defaults()
	return &CompatClient{cfg: cfg, chat: sdk.NewChatCompletionService(requestOptions(cfg)...)}, nil
}

// Complete sends req and returns the whole response.
func (c *CompatClient) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	p, err := c.params(req, false)
	if err != nil {
		return nil, err
	}
	r, err := c.chat.New(ctx, p)
	if err != nil {
		return nil, mapError(ctx, CompatProviderName, nil, err)
	}
	if len(r.Choices) == 0 {
		return nil, &llm.Error{Kind: llm.KindServer, Provider: CompatProviderName, Message: "response has no choices"}
	}
	ch := r.Choices[0]
	resp := &llm.Response{ID: r.ID, Model: r.Model, Message: llm.Message{Role: llm.RoleAssistant}}
	if rc := extraString(ch.Message.JSON.ExtraFields, "reasoning_content", "reasoning"); rc != "" {
		resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartReasoning, Text: rc})
	}
	if ch.Message.Content != "" {
		resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartText, Text: ch.Message.Content})
	}
	for _, tc := range ch.Message.ToolCalls {
		id := tc.ID
		if id == "" {
			id = newCallID()
		}
		resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartToolCall,
			ToolCall: &llm.ToolCall{ID: id, Name: tc.Function.Name, Arguments: arguments(tc.Function.Arguments)}})
	}
	resp.Usage = chatUsage(r.Usage)
	resp.FinishReason = chatFinish(ch.FinishReason, len(ch.Message.ToolCalls) > 0)
	return resp, nil
}

// Stream sends req and yields its events, ending with EventFinish.
func (c *CompatClient) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		p, err := c.params(req, true)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		w := &httpx.Watch{MaxBytes: maxStreamBytes, Idle: max(c.cfg.StreamIdleTimeout, 0)}
		stream := c.chat.NewStreaming(httpx.WithWatch(ctx, w), p)
		defer stream.Close()
		resp := &llm.Response{Message: llm.Message{Role: llm.RoleAssistant}}
		var text, reasoning strings.Builder
		type call struct {
			id, name string
			args     strings.Builder
			started  bool
		}
		calls := map[int64]*call{}
		finish := ""
		sawChunk := false
		for stream.Next() {
			chunk := stream.Current()
			sawChunk = true
			if chunk.ID != "" {
				resp.ID = chunk.ID
			}
			if chunk.Model != "" {
				resp.Model = chunk.Model
			}
			if chunk.JSON.Usage.Valid() {
				resp.Usage = chatUsage(chunk.Usage)
			}
			var out []llm.StreamEvent
			for _, ch := range chunk.Choices {
				if ch.Index != 0 {
					continue
				}
				if rc := extraString(ch.Delta.JSON.ExtraFields, "reasoning_content", "reasoning"); rc != "" {
					reasoning.WriteString(rc)
					out = append(out, llm.StreamEvent{Type: llm.EventReasoningDelta, Delta: rc})
				}
				if ch.Delta.Content != "" {
					text.WriteString(ch.Delta.Content)
					out = append(out, llm.StreamEvent{Type: llm.EventTextDelta, Delta: ch.Delta.Content})
				}
				for _, d := range ch.Delta.ToolCalls {
					cl := calls[d.Index]
					if cl == nil {
						cl = &call{}
						calls[d.Index] = cl
					}
					if d.ID != "" && cl.id == "" {
						cl.id = d.ID
					}
					if d.Function.Name != "" && cl.name == "" {
						cl.name = d.Function.Name
					}
					if !cl.started && cl.name != "" {
						if cl.id == "" {
							cl.id = newCallID()
						}
						cl.started = true
						out = append(out, llm.StreamEvent{Type: llm.EventToolCallStart, ToolCall: &llm.ToolCall{ID: cl.id, Name: cl.name}})
					}
					if d.Function.Arguments != "" {
						cl.args.WriteString(d.Function.Arguments)
						if cl.started {
							out = append(out, llm.StreamEvent{Type: llm.EventToolCallDelta, ToolCall: &llm.ToolCall{ID: cl.id, Name: cl.name}, Delta: d.Function.Arguments})
						}
					}
				}
				if ch.FinishReason != "" {
					finish = ch.FinishReason
				}
			}
			for _, e := range out {
				if !yield(e, nil) {
					return
				}
			}
		}
		if err := stream.Err(); err != nil {
			yield(llm.StreamEvent{}, mapError(ctx, CompatProviderName, w, err))
			return
		}
		if err := httpx.Failure(ctx, CompatProviderName, w, nil); err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		if !sawChunk || finish == "" {
			yield(llm.StreamEvent{}, httpx.Incomplete(CompatProviderName))
			return
		}
		if reasoning.Len() > 0 {
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartReasoning, Text: reasoning.String()})
		}
		if text.Len() > 0 {
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartText, Text: text.String()})
		}
		indexes := make([]int64, 0, len(calls))
		for i := range calls {
			indexes = append(indexes, i)
		}
		sort.Slice(indexes, func(a, b int) bool { return indexes[a] < indexes[b] })
		for _, i := range indexes {
			cl := calls[i]
			if cl.id == "" {
				cl.id = newCallID()
			}
			tc := llm.ToolCall{ID: cl.id, Name: cl.name, Arguments: arguments(cl.args.String())}
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartToolCall, ToolCall: &tc})
			if !yield(llm.StreamEvent{Type: llm.EventToolCallEnd, ToolCall: &tc}, nil) {
				return
			}
		}
		resp.FinishReason = chatFinish(finish, len(calls) > 0)
		yield(llm.StreamEvent{Type: llm.EventFinish, Response: resp}, nil)
	}
}

func newCallID() string {
	return "call_" + randomHex()
}

// extraString reads the first of keys present as a non-empty JSON string in
// fields (non-standard fields such as reasoning_content).
func extraString(fields map[string]respjson.Field, keys ...string) string {
	for _, k := range keys {
		f, ok := fields[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

func chatUsage(u sdk.CompletionUsage) llm.Usage {
	return llm.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
		ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens, CacheReadTokens: u.PromptTokensDetails.CachedTokens}
}

func chatFinish(reason string, calls bool) llm.FinishReason {
	switch reason {
	case "tool_calls", "function_call":
		return llm.FinishToolCalls
	case "length":
		return llm.FinishLength
	case "content_filter":
		return llm.FinishContentFilter
	case "stop", "":
		if calls {
			return llm.FinishToolCalls
		}
		return llm.FinishStop
	}
	return llm.FinishOther
}

// params builds the Chat Completions request for req: the conversation as
// messages, then tools, tool choice, reasoning and limits.
func (c *CompatClient) params(req *llm.Request, stream bool) (sdk.ChatCompletionNewParams, error) {
	var opts CompatOptions
	if raw := req.ProviderOptions[CompatProviderName]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return sdk.ChatCompletionNewParams{}, invalid(CompatProviderName, "providerOptions.openai-compatible: %v", err)
		}
	}
	if req.WebSearch != nil {
		// Chat Completions has no server-side search tool; dropping the
		// option would leave the model without the search it was promised.
		return sdk.ChatCompletionNewParams{}, invalid(CompatProviderName, "web search: Chat Completions has no server-side web search tool; use the openai (Responses), anthropic or gemini provider, or the web_fetch tool")
	}
	model := cmp.Or(req.Model, c.cfg.Model)
	if model == "" {
		return sdk.ChatCompletionNewParams{}, invalid(CompatProviderName, "no model given")
	}
	p := sdk.ChatCompletionNewParams{Model: shared.ChatModel(model), Messages: chatMessages(req.Messages)}
	tools, err := chatTools(req.Tools, opts.Strict)
	if err != nil {
		return sdk.ChatCompletionNewParams{}, err
	}
	p.Tools = tools
	if len(req.Tools) > 0 {
		if !opts.NoParallelToolCalls {
			p.ParallelToolCalls = param.NewOpt(req.ParallelToolCalls == nil || *req.ParallelToolCalls)
		}
		switch req.ToolChoice {
		case llm.ToolChoiceNone, llm.ToolChoiceRequired, llm.ToolChoiceAuto:
			p.ToolChoice = sdk.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt(string(req.ToolChoice))}
		}
	}
	if effort := strings.ToLower(req.ReasoningEffort); effort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(effort)
	}
	if req.MaxOutputTokens > 0 {
		p.MaxTokens = param.NewOpt(int64(req.MaxOutputTokens))
	}
	if req.CacheKey != "" && !opts.NoPromptCacheKey {
		p.PromptCacheKey = param.NewOpt(req.CacheKey)
	}
	if stream {
		p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)}
	}
	return p, nil
}

// chatBuilder accumulates the messages of a conversation. Every tool call
// of an assistant message that has no tool message by the next turn gets
// an error tool message, so servers accept the history.
type chatBuilder struct {
	msgs     []sdk.ChatCompletionMessageParamUnion
	pending  []string // call ids of the last assistant message
	answered map[string]bool
}

// chatMessages maps the conversation.
func chatMessages(msgs []llm.Message) []sdk.ChatCompletionMessageParamUnion {
	b := &chatBuilder{answered: map[string]bool{}}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			b.closeCalls()
			if t := m.Text(); t != "" {
				b.msgs = append(b.msgs, sdk.SystemMessage(t))
			}
		case llm.RoleUser, llm.RoleTool:
			b.user(m)
		case llm.RoleAssistant:
			b.closeCalls()
			b.assistant(m)
		}
	}
	b.closeCalls()
	return b.msgs
}

// closeCalls answers the pending calls that have no tool message.
func (b *chatBuilder) closeCalls() {
	for _, id := range b.pending {
		if !b.answered[id] {
			b.msgs = append(b.msgs, sdk.ToolMessage("error: tool call was not executed", id))
		}
	}
	b.pending = nil
	b.answered = map[string]bool{}
}

// user adds a user or tool message: tool results as tool messages (text
// only), text and images as one user message (a plain string when it has
// no image).
func (b *chatBuilder) user(m llm.Message) {
	var parts []sdk.ChatCompletionContentPartUnionParam
	hasImage := false
	for _, part := range m.Content {
		switch part.Kind {
		case llm.PartToolResult:
			if part.ToolResult == nil {
				continue
			}
			b.answered[part.ToolResult.CallID] = true
			b.msgs = append(b.msgs, chatToolMessage(part.ToolResult))
		case llm.PartText:
			parts = append(parts, sdk.TextContentPart(part.Text))
		case llm.PartImage:
			if part.Image != nil {
				hasImage = true
				parts = append(parts, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: dataURL(part.Image)}))
			}
		}
	}
	if len(parts) == 0 {
		return
	}
	b.closeCalls()
	if hasImage {
		b.msgs = append(b.msgs, sdk.UserMessage(parts))
		return
	}
	var text strings.Builder
	for _, p := range parts {
		text.WriteString(p.OfText.Text)
	}
	b.msgs = append(b.msgs, sdk.UserMessage(text.String()))
}

// chatToolMessage is the tool message of r; its images are replaced by a
// note, as tool messages carry text only.
func chatToolMessage(r *llm.ToolResult) sdk.ChatCompletionMessageParamUnion {
	content := r.Content
	if len(r.Images) > 0 {
		content += fmt.Sprintf("\n[%d image(s) omitted: Chat Completions tool messages carry text only]", len(r.Images))
	}
	return sdk.ToolMessage(content, r.CallID)
}

// assistant adds an assistant message: its text and tool calls.
func (b *chatBuilder) assistant(m llm.Message) {
	a := sdk.ChatCompletionAssistantMessageParam{}
	if t := m.Text(); t != "" {
		a.Content.OfString = param.NewOpt(t)
	}
	// Reasoning is never sent back: servers reject or ignore it.
	for _, tc := range m.ToolCalls() {
		a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
			ID: tc.ID, Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: string(arguments(string(tc.Arguments)))}}})
		b.pending = append(b.pending, tc.ID)
	}
	if a.Content.OfString.Valid() || len(a.ToolCalls) > 0 {
		b.msgs = append(b.msgs, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
	}
}

// chatTools maps the function tools.
func chatTools(defs []llm.ToolDefinition, strict bool) ([]sdk.ChatCompletionToolUnionParam, error) {
	var tools []sdk.ChatCompletionToolUnionParam
	for _, t := range defs {
		schema, err := toolSchema(CompatProviderName, t)
		if err != nil {
			return nil, err
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schema), Strict: param.NewOpt(strict)}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		tools = append(tools, sdk.ChatCompletionFunctionTool(fn))
	}
	return tools, nil
}
