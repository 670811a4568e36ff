package anthropic

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"slices"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/internal/httpx"
)

// ProviderName is the provider name of this adapter, used in llm.Error and
// as the ContentPart.Provider of the raw parts it produces.
const ProviderName = "anthropic"

// DefaultBaseURL is the Anthropic API root.
const DefaultBaseURL = "https://api.anthropic.com"

// Defaults.
const (
	DefaultMaxOutputTokens   = 32000
	DefaultStreamIdleTimeout = 2 * time.Minute
	DefaultRequestTimeout    = 10 * time.Minute
)

// Thinking budgets for ReasoningEffort values.
var thinkingBudgets = map[string]int64{
	"minimal": 1024,
	"low":     2048,
	"medium":  8192,
	"high":    24576,
	"xhigh":   32768,
	"max":     49152,
}

// Config configures a Client. Only APIKey and BaseURL are used for
// credentials and endpoint; the environment is never read.
type Config struct {
	APIKey string
	// BaseURL is the API root without /v1 (DefaultBaseURL when empty).
	BaseURL string
	// Model is used when a Request leaves Model empty.
	Model string
	// MaxOutputTokens is max_tokens when a Request leaves it zero.
	MaxOutputTokens int
	// StreamIdleTimeout ends a stream that sends no bytes for this long
	// with a network error (DefaultStreamIdleTimeout when zero; negative
	// disables it).
	StreamIdleTimeout time.Duration
	// RequestTimeout bounds one non-streamed request (DefaultRequestTimeout
	// when zero).
	RequestTimeout time.Duration
	HTTPClient     *http.Client
}

// Options are the Request.ProviderOptions["anthropic"] settings.
type Options struct {
	// BetaHeaders are sent as anthropic-beta.
	BetaHeaders []string `json:"beta_headers,omitempty"`
	// DisableCache turns the prompt-caching breakpoints off.
	DisableCache bool `json:"disable_cache,omitempty"`
}

// Client is the Anthropic Messages adapter. It is safe for concurrent use.
type Client struct {
	cfg      Config
	messages sdk.MessageService
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	drop := []string{}
	if cfg.APIKey == "" {
		drop = append(drop, "X-Api-Key", "Authorization")
	}
	// NewMessageService with explicit options only: sdk.NewClient would
	// add DefaultClientOptions, which read ANTHROPIC_API_KEY,
	// ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN, profiles and custom headers
	// from the environment.
	opts := []option.RequestOption{
		option.WithHTTPClient(httpx.Client(cfg.HTTPClient, drop...)),
		option.WithBaseURL(cfg.BaseURL),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Client{cfg: cfg, messages: sdk.NewMessageService(opts...)}, nil
}

// Complete sends req and returns the whole response.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	params, opts, err := c.params(req)
	if err != nil {
		return nil, err
	}
	opts = append(opts, option.WithRequestTimeout(c.cfg.RequestTimeout))
	base := params.Messages
	var merged *sdk.Message
	for i := 0; ; i++ {
		msg, err := c.messages.New(ctx, params, opts...)
		if err != nil {
			return nil, mapError(ctx, nil, err)
		}
		merged = mergePaused(merged, msg)
		if msg.StopReason != sdk.StopReasonPauseTurn || i == MaxPauseContinuations {
			break
		}
		params.Messages = continuation(base, merged)
	}
	return convertMessage(merged)
}

// MaxPauseContinuations bounds how often one call continues a turn the API
// paused (stop_reason pause_turn, e.g. a long server-side web search);
// after that the paused answer is returned with finish reason other.
const MaxPauseContinuations = 5

// mergePaused appends msg, the continuation of a paused turn, to merged
// (nil for the first response): content in order, usage summed over the
// requests, the stop reason of the last.
func mergePaused(merged, msg *sdk.Message) *sdk.Message {
	if merged == nil {
		m := *msg
		m.Content = slices.Clone(msg.Content)
		return &m
	}
	merged.Content = append(merged.Content, msg.Content...)
	merged.StopReason = msg.StopReason
	merged.Usage.InputTokens += msg.Usage.InputTokens
	merged.Usage.OutputTokens += msg.Usage.OutputTokens
	merged.Usage.CacheReadInputTokens += msg.Usage.CacheReadInputTokens
	merged.Usage.CacheCreationInputTokens += msg.Usage.CacheCreationInputTokens
	return merged
}

// continuation is the conversation that continues a paused turn: the
// original messages and the paused assistant content as it came, which the
// API resumes.
func continuation(base []sdk.MessageParam, merged *sdk.Message) []sdk.MessageParam {
	return append(slices.Clone(base), merged.ToParam())
}

// Stream sends req and yields its events, ending with EventFinish.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		params, opts, err := c.params(req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		base := params.Messages
		var merged *sdk.Message
		for i := 0; ; i++ {
			acc, ok := c.streamOnce(ctx, params, opts, yield)
			if !ok {
				return
			}
			merged = mergePaused(merged, acc)
			if acc.StopReason != sdk.StopReasonPauseTurn || i == MaxPauseContinuations {
				break
			}
			params.Messages = continuation(base, merged)
		}
		resp, err := convertMessage(merged)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		yield(llm.StreamEvent{Type: llm.EventFinish, Response: resp}, nil)
	}
}

// streamOnce streams one request, yielding its deltas, and returns the
// accumulated message; false means it yielded an error or the consumer
// stopped.
func (c *Client) streamOnce(ctx context.Context, params sdk.MessageNewParams, opts []option.RequestOption, yield func(llm.StreamEvent, error) bool) (*sdk.Message, bool) {
	w := &httpx.Watch{MaxBytes: maxStreamBytes, Idle: max(c.cfg.StreamIdleTimeout, 0)}
	sctx := httpx.WithWatch(ctx, w)
	stream := c.messages.NewStreaming(sctx, params, opts...)
	defer stream.Close()
	var acc sdk.Message
	calls := map[int64]*llm.ToolCall{}
	searches := map[int64]bool{} // indexes of server_tool_use web_search blocks
	done := false
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			yield(llm.StreamEvent{}, &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: "accumulate stream: " + err.Error()})
			return nil, false
		}
		var out []llm.StreamEvent
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				tc := &llm.ToolCall{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}
				calls[ev.Index] = tc
				out = append(out, llm.StreamEvent{Type: llm.EventToolCallStart, ToolCall: &llm.ToolCall{ID: tc.ID, Name: tc.Name}})
			}
			if ev.ContentBlock.Type == "server_tool_use" && ev.ContentBlock.Name == webSearchName {
				searches[ev.Index] = true
			}
			if ev.ContentBlock.Type == "web_search_tool_result" && int(ev.Index) < len(acc.Content) {
				ws := &llm.WebSearchCall{ID: ev.ContentBlock.ToolUseID}
				addSearchResults(ws, json.RawMessage(acc.Content[ev.Index].RawJSON()))
				out = append(out, llm.StreamEvent{Type: llm.EventWebSearch, WebSearch: ws})
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				out = append(out, llm.StreamEvent{Type: llm.EventTextDelta, Delta: ev.Delta.Text})
			case "thinking_delta":
				out = append(out, llm.StreamEvent{Type: llm.EventReasoningDelta, Delta: ev.Delta.Thinking})
			case "input_json_delta":
				if tc := calls[ev.Index]; tc != nil && ev.Delta.PartialJSON != "" {
					out = append(out, llm.StreamEvent{Type: llm.EventToolCallDelta, ToolCall: &llm.ToolCall{ID: tc.ID, Name: tc.Name}, Delta: ev.Delta.PartialJSON})
				}
			}
		case "content_block_stop":
			if tc := calls[ev.Index]; tc != nil && int(ev.Index) < len(acc.Content) {
				end := *tc
				end.Arguments = toolInput(acc.Content[ev.Index].Input)
				out = append(out, llm.StreamEvent{Type: llm.EventToolCallEnd, ToolCall: &end})
			}
			if searches[ev.Index] && int(ev.Index) < len(acc.Content) {
				b := acc.Content[ev.Index]
				out = append(out, llm.StreamEvent{Type: llm.EventWebSearch, WebSearch: &llm.WebSearchCall{ID: b.ID, Queries: searchQueries(b.Input)}})
			}
		case "message_stop":
			done = true
		}
		for _, e := range out {
			if !yield(e, nil) {
				return nil, false
			}
		}
	}
	if err := stream.Err(); err != nil {
		yield(llm.StreamEvent{}, mapError(ctx, w, err))
		return nil, false
	}
	if !done {
		if err := httpx.Failure(ctx, ProviderName, w, nil); err != nil {
			yield(llm.StreamEvent{}, err)
			return nil, false
		}
		yield(llm.StreamEvent{}, httpx.Incomplete(ProviderName))
		return nil, false
	}
	return &acc, true
}

func toolInput(raw json.RawMessage) json.RawMessage {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return json.RawMessage("{}")
	}
	return append(json.RawMessage(nil), raw...)
}

// params builds the SDK request for req: system blocks, messages, tools,
// thinking and tool choice, with prompt-caching breakpoints unless the
// options disable them.
func (c *Client) params(req *llm.Request) (sdk.MessageNewParams, []option.RequestOption, error) {
	var opts Options
	if raw := req.ProviderOptions[ProviderName]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return sdk.MessageNewParams{}, nil, invalid("providerOptions.anthropic: %v", err)
		}
	}
	model := cmp.Or(req.Model, c.cfg.Model)
	if model == "" {
		return sdk.MessageNewParams{}, nil, invalid("no model given")
	}
	maxTokens := int64(req.MaxOutputTokens)
	if maxTokens <= 0 {
		maxTokens = int64(c.cfg.MaxOutputTokens)
	}
	p := sdk.MessageNewParams{Model: sdk.Model(model), MaxTokens: maxTokens}
	// Prompt caching: at most three breakpoints (the API allows four) on
	// the stable prefix — the last tool, the last system block and the last
	// cacheable block of the conversation — so the next request, which
	// extends this one, reads all of it from the cache.
	cache := !opts.DisableCache
	system, rest := splitSystem(req.Messages, cache)
	p.System = system
	msgs, err := convertMessages(rest)
	if err != nil {
		return sdk.MessageNewParams{}, nil, err
	}
	if cache && len(msgs) > 0 {
		cacheLastBlock(&msgs[len(msgs)-1])
	}
	p.Messages = msgs
	if p.Tools, err = toolParams(req, cache); err != nil {
		return sdk.MessageNewParams{}, nil, err
	}
	thinking, err := thinkingConfig(req.ReasoningEffort, &p.MaxTokens)
	if err != nil {
		return sdk.MessageNewParams{}, nil, err
	}
	p.Thinking = thinking
	if len(req.Tools) > 0 {
		p.ToolChoice = toolChoice(req, thinking.OfAdaptive != nil || thinking.OfEnabled != nil)
	}
	var ropts []option.RequestOption
	if len(opts.BetaHeaders) > 0 {
		ropts = append(ropts, option.WithHeader("anthropic-beta", strings.Join(opts.BetaHeaders, ",")))
	}
	return p, ropts, nil
}

// splitSystem returns the system text blocks (the last one a cache
// breakpoint when cache is set) and the other messages.
func splitSystem(msgs []llm.Message, cache bool) ([]sdk.TextBlockParam, []llm.Message) {
	var system []sdk.TextBlockParam
	var rest []llm.Message
	for _, m := range msgs {
		if m.Role == llm.RoleSystem {
			if t := m.Text(); t != "" {
				system = append(system, sdk.TextBlockParam{Text: t})
			}
			continue
		}
		rest = append(rest, m)
	}
	if cache && len(system) > 0 {
		system[len(system)-1].CacheControl = sdk.NewCacheControlEphemeralParam()
	}
	return system, rest
}

// cacheLastBlock sets a cache breakpoint on the last cacheable block of m.
func cacheLastBlock(m *sdk.MessageParam) {
	for i := len(m.Content) - 1; i >= 0; i-- {
		if setCache(&m.Content[i]) {
			return
		}
	}
}

// toolParams maps the web search tool (first, so the breakpoint on the last
// function tool covers it) and the function tools.
func toolParams(req *llm.Request, cache bool) ([]sdk.ToolUnionParam, error) {
	var out []sdk.ToolUnionParam
	if req.WebSearch != nil {
		ws, err := webSearchTool(req.WebSearch)
		if err != nil {
			return nil, err
		}
		if cache && len(req.Tools) == 0 {
			ws.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		out = append(out, sdk.ToolUnionParam{OfWebSearchTool20250305: ws})
	}
	for i, t := range req.Tools {
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		tool := &sdk.ToolParam{Name: t.Name, InputSchema: param.Override[sdk.ToolInputSchemaParam](schema)}
		if t.Description != "" {
			tool.Description = param.NewOpt(t.Description)
		}
		if cache && i == len(req.Tools)-1 {
			tool.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		out = append(out, sdk.ToolUnionParam{OfTool: tool})
	}
	return out, nil
}

// webSearchTool maps the web search options to the web_search tool.
func webSearchTool(ws *llm.WebSearch) (*sdk.WebSearchTool20250305Param, error) {
	if len(ws.AllowedDomains) > 0 && len(ws.BlockedDomains) > 0 {
		return nil, invalid("web search: allowed and blocked domains cannot both be set")
	}
	if ws.MaxUses < 0 {
		return nil, invalid("web search: max uses %d: must not be negative", ws.MaxUses)
	}
	tool := &sdk.WebSearchTool20250305Param{AllowedDomains: ws.AllowedDomains, BlockedDomains: ws.BlockedDomains}
	if ws.MaxUses > 0 {
		tool.MaxUses = param.NewOpt(int64(ws.MaxUses))
	}
	return tool, nil
}

// thinkingConfig maps the reasoning effort to a thinking config (zero for
// none). A budget must be at least 1024 and below max_tokens, so a small
// maxTokens is raised by 1024.
func thinkingConfig(effort string, maxTokens *int64) (sdk.ThinkingConfigParamUnion, error) {
	switch e := strings.ToLower(effort); e {
	case "", "none":
		return sdk.ThinkingConfigParamUnion{}, nil
	case "adaptive":
		return sdk.ThinkingConfigParamUnion{OfAdaptive: &sdk.ThinkingConfigAdaptiveParam{}}, nil
	default:
		budget, ok := thinkingBudgets[e]
		if !ok {
			return sdk.ThinkingConfigParamUnion{}, invalid("reasoning effort %q: want one of none, minimal, low, medium, high, xhigh, max, adaptive", effort)
		}
		if *maxTokens <= 1024 {
			*maxTokens += 1024
		}
		budget = min(budget, *maxTokens-1)
		return sdk.ThinkingConfigParamUnion{OfEnabled: &sdk.ThinkingConfigEnabledParam{BudgetTokens: budget}}, nil
	}
}

// toolChoice maps the tool choice and parallel tool use. Forced tool use
// is not allowed with extended thinking, so required becomes auto then.
func toolChoice(req *llm.Request, thinking bool) sdk.ToolChoiceUnionParam {
	serial := param.NewOpt(req.ParallelToolCalls != nil && !*req.ParallelToolCalls)
	switch {
	case req.ToolChoice == llm.ToolChoiceNone:
		return sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
	case req.ToolChoice == llm.ToolChoiceRequired && !thinking:
		return sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{DisableParallelToolUse: serial}}
	default:
		return sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: serial}}
	}
}

func setCache(b *sdk.ContentBlockParamUnion) bool {
	cc := sdk.NewCacheControlEphemeralParam()
	switch {
	case b.OfText != nil:
		b.OfText.CacheControl = cc
	case b.OfImage != nil:
		b.OfImage.CacheControl = cc
	case b.OfToolUse != nil:
		b.OfToolUse.CacheControl = cc
	case b.OfToolResult != nil:
		b.OfToolResult.CacheControl = cc
	default:
		return false
	}
	return true
}

// messageBuilder accumulates the messages of a conversation: tool results
// and other user content wait for the next user message, results first.
type messageBuilder struct {
	out      []sdk.MessageParam
	results  []sdk.ContentBlockParamUnion // tool_result blocks waiting for the user message
	userRest []sdk.ContentBlockParamUnion
	pending  []string // tool_use ids of the last assistant message not yet answered
	answered map[string]bool
}

// convertMessages maps the conversation. Tool results (RoleTool messages,
// or tool-result parts anywhere) are gathered into the next user message,
// ahead of its other content; every tool_use of an assistant message that
// has no result gets an error result so the API accepts the history.
func convertMessages(msgs []llm.Message) ([]sdk.MessageParam, error) {
	b := &messageBuilder{answered: map[string]bool{}}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser, llm.RoleTool:
			b.user(m)
		case llm.RoleAssistant:
			b.flushUser()
			if err := b.assistant(m); err != nil {
				return nil, err
			}
		}
	}
	b.flushUser()
	return b.out, nil
}

// flushUser writes the waiting user message, with an error result for
// every unanswered tool_use.
func (b *messageBuilder) flushUser() {
	if len(b.results) == 0 && len(b.userRest) == 0 && len(b.pending) == 0 {
		return
	}
	for _, id := range b.pending {
		if !b.answered[id] {
			b.results = append(b.results, sdk.ContentBlockParamUnion{OfToolResult: &sdk.ToolResultBlockParam{
				ToolUseID: id, IsError: param.NewOpt(true),
				Content: []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: "tool call was not executed"}}}}})
		}
	}
	blocks := append(b.results, b.userRest...)
	if len(blocks) > 0 {
		b.out = append(b.out, sdk.MessageParam{Role: sdk.MessageParamRoleUser, Content: blocks})
	}
	b.results, b.userRest, b.pending = nil, nil, nil
	b.answered = map[string]bool{}
}

// user gathers a user or tool message's blocks into the waiting message.
func (b *messageBuilder) user(m llm.Message) {
	for _, part := range m.Content {
		switch part.Kind {
		case llm.PartToolResult:
			if part.ToolResult == nil {
				continue
			}
			b.answered[part.ToolResult.CallID] = true
			b.results = append(b.results, toolResultBlock(part.ToolResult))
		case llm.PartText:
			if part.Text != "" {
				b.userRest = append(b.userRest, sdk.ContentBlockParamUnion{OfText: &sdk.TextBlockParam{Text: part.Text}})
			}
		case llm.PartImage:
			if part.Image != nil {
				b.userRest = append(b.userRest, imageBlock(part.Image))
			}
		}
	}
}

// assistant adds an assistant message; its tool_use ids become pending.
func (b *messageBuilder) assistant(m llm.Message) error {
	var blocks []sdk.ContentBlockParamUnion
	for _, part := range m.Content {
		bs, err := assistantBlocks(part)
		if err != nil {
			return err
		}
		blocks = append(blocks, bs...)
		if part.Kind == llm.PartToolCall && part.ToolCall != nil {
			b.pending = append(b.pending, part.ToolCall.ID)
		}
	}
	if len(blocks) > 0 {
		b.out = append(b.out, sdk.MessageParam{Role: sdk.MessageParamRoleAssistant, Content: blocks})
	} else {
		b.pending = nil
	}
	return nil
}

// assistantBlocks maps one assistant part. Reasoning and web searches are
// replayed only from this provider's raw blocks.
func assistantBlocks(part llm.ContentPart) ([]sdk.ContentBlockParamUnion, error) {
	own := part.Provider == ProviderName && len(part.Raw) > 0
	switch part.Kind {
	case llm.PartText:
		if part.Text != "" {
			return []sdk.ContentBlockParamUnion{{OfText: &sdk.TextBlockParam{Text: part.Text}}}, nil
		}
	case llm.PartReasoning:
		if own {
			b, err := rawThinking(part.Raw)
			if err != nil {
				return nil, err
			}
			return []sdk.ContentBlockParamUnion{b}, nil
		}
	case llm.PartWebSearch:
		if own {
			return rawWebSearch(part.Raw)
		}
	case llm.PartToolCall:
		if part.ToolCall != nil {
			return []sdk.ContentBlockParamUnion{toolUseBlock(part.ToolCall)}, nil
		}
	}
	return nil, nil
}

// rawWebSearch returns a web search part's raw blocks, sent back verbatim
// as the API requires.
func rawWebSearch(raw json.RawMessage) ([]sdk.ContentBlockParamUnion, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, invalid("web search part: raw blocks: %v", err)
	}
	blocks := make([]sdk.ContentBlockParamUnion, 0, len(raws))
	for _, r := range raws {
		blocks = append(blocks, param.Override[sdk.ContentBlockParamUnion](r))
	}
	return blocks, nil
}

// toolUseBlock is the tool_use block of tc; arguments that are not JSON
// become an empty object.
func toolUseBlock(tc *llm.ToolCall) sdk.ContentBlockParamUnion {
	var input any = map[string]any{}
	if len(tc.Arguments) > 0 && json.Valid(tc.Arguments) {
		input = json.RawMessage(tc.Arguments)
	}
	return sdk.ContentBlockParamUnion{OfToolUse: &sdk.ToolUseBlockParam{ID: tc.ID, Name: tc.Name, Input: input}}
}

func toolResultBlock(r *llm.ToolResult) sdk.ContentBlockParamUnion {
	content := []sdk.ToolResultBlockParamContentUnion{}
	if r.Content != "" || len(r.Images) == 0 {
		text := r.Content
		if text == "" {
			text = "(no output)"
		}
		content = append(content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: text}})
	}
	for i := range r.Images {
		img := imageBlock(&r.Images[i])
		content = append(content, sdk.ToolResultBlockParamContentUnion{OfImage: img.OfImage})
	}
	return sdk.ContentBlockParamUnion{OfToolResult: &sdk.ToolResultBlockParam{
		ToolUseID: r.CallID, IsError: param.NewOpt(r.IsError), Content: content}}
}

func imageBlock(img *llm.Image) sdk.ContentBlockParamUnion {
	return sdk.ContentBlockParamUnion{OfImage: &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{
		OfBase64: &sdk.Base64ImageSourceParam{Data: base64.StdEncoding.EncodeToString(img.Data),
			MediaType: sdk.Base64ImageSourceMediaType(img.MediaType)}}}}
}

// rawThinking rebuilds a thinking or redacted_thinking block from Raw.
func rawThinking(raw json.RawMessage) (sdk.ContentBlockParamUnion, error) {
	var b struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
		Data      string `json:"data"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return sdk.ContentBlockParamUnion{}, invalid("reasoning part: raw block: %v", err)
	}
	switch b.Type {
	case "thinking":
		return sdk.ContentBlockParamUnion{OfThinking: &sdk.ThinkingBlockParam{Thinking: b.Thinking, Signature: b.Signature}}, nil
	case "redacted_thinking":
		return sdk.ContentBlockParamUnion{OfRedactedThinking: &sdk.RedactedThinkingBlockParam{Data: b.Data}}, nil
	}
	return sdk.ContentBlockParamUnion{}, invalid("reasoning part: raw block type %q", b.Type)
}

func convertMessage(msg *sdk.Message) (*llm.Response, error) {
	resp := &llm.Response{ID: msg.ID, Model: string(msg.Model), Message: llm.Message{Role: llm.RoleAssistant}}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartText, Text: b.Text, Citations: citations(b.Citations)})
		case "server_tool_use":
			if b.Name != webSearchName {
				continue
			}
			raw, err := json.Marshal([]json.RawMessage{json.RawMessage(b.RawJSON())})
			if err != nil {
				return nil, &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: "encode server_tool_use block: " + err.Error()}
			}
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartWebSearch, Provider: ProviderName, Raw: raw,
				WebSearch: &llm.WebSearchCall{ID: b.ID, Queries: searchQueries(b.Input)}})
		case "web_search_tool_result":
			if err := addSearchResult(&resp.Message, b); err != nil {
				return nil, err
			}
		case "thinking":
			raw, _ := json.Marshal(map[string]string{"type": "thinking", "thinking": b.Thinking, "signature": b.Signature})
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartReasoning, Text: b.Thinking, Provider: ProviderName, Raw: raw})
		case "redacted_thinking":
			raw, _ := json.Marshal(map[string]string{"type": "redacted_thinking", "data": b.Data})
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartReasoning, Provider: ProviderName, Raw: raw})
		case "tool_use":
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartToolCall,
				ToolCall: &llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: toolInput(b.Input)}})
		}
	}
	u := msg.Usage
	resp.Usage = llm.Usage{
		InputTokens:      u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
		OutputTokens:     u.OutputTokens,
		CacheReadTokens:  u.CacheReadInputTokens,
		CacheWriteTokens: u.CacheCreationInputTokens,
	}
	resp.FinishReason = finishReason(msg.StopReason)
	if resp.FinishReason == llm.FinishStop && len(resp.ToolCalls()) > 0 {
		resp.FinishReason = llm.FinishToolCalls
	}
	return resp, nil
}

// webSearchName is the name of Anthropic's web search server tool.
const webSearchName = "web_search"

// searchQueries reads the query of a web_search server_tool_use input.
func searchQueries(input json.RawMessage) []string {
	var in struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(input, &in) != nil || in.Query == "" {
		return nil
	}
	return []string{in.Query}
}

// addSearchResults adds the results (or the error) of a
// web_search_tool_result block to ws.
func addSearchResults(ws *llm.WebSearchCall, block json.RawMessage) {
	var b struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(block, &b) != nil {
		return
	}
	var results []struct {
		URL   string `json:"url"`
		Title string `json:"title"`
	}
	if json.Unmarshal(b.Content, &results) == nil {
		for _, r := range results {
			ws.Results = append(ws.Results, llm.WebSearchResult{URL: r.URL, Title: r.Title})
		}
		return
	}
	var e struct {
		ErrorCode string `json:"error_code"`
	}
	if json.Unmarshal(b.Content, &e) == nil && e.ErrorCode != "" {
		ws.Error = e.ErrorCode
	}
}

// addSearchResult folds a web_search_tool_result block into the web search
// part of its server_tool_use (one part holds both blocks, in order), or
// into a part of its own if that is missing.
func addSearchResult(msg *llm.Message, b sdk.ContentBlockUnion) error {
	block := json.RawMessage(b.RawJSON())
	for i := len(msg.Content) - 1; i >= 0; i-- {
		p := &msg.Content[i]
		if p.Kind != llm.PartWebSearch || p.WebSearch == nil || p.WebSearch.ID != b.ToolUseID {
			continue
		}
		var raws []json.RawMessage
		if err := json.Unmarshal(p.Raw, &raws); err != nil {
			return &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: "decode web search part: " + err.Error()}
		}
		raw, err := json.Marshal(append(raws, block))
		if err != nil {
			return &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: "encode web search part: " + err.Error()}
		}
		ws := *p.WebSearch
		addSearchResults(&ws, block)
		p.WebSearch, p.Raw = &ws, raw
		return nil
	}
	raw, err := json.Marshal([]json.RawMessage{block})
	if err != nil {
		return &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: "encode web search part: " + err.Error()}
	}
	ws := &llm.WebSearchCall{ID: b.ToolUseID}
	addSearchResults(ws, block)
	msg.Content = append(msg.Content, llm.ContentPart{Kind: llm.PartWebSearch, Provider: ProviderName, Raw: raw, WebSearch: ws})
	return nil
}

// citations maps the web_search_result_location citations of a text block.
func citations(cs []sdk.TextCitationUnion) []llm.Citation {
	var out []llm.Citation
	for _, c := range cs {
		if c.Type == "web_search_result_location" {
			out = append(out, llm.Citation{URL: c.URL, Title: c.Title, CitedText: c.CitedText})
		}
	}
	return out
}

func finishReason(r sdk.StopReason) llm.FinishReason {
	switch r {
	case sdk.StopReasonEndTurn, sdk.StopReasonStopSequence:
		return llm.FinishStop
	case sdk.StopReasonToolUse:
		return llm.FinishToolCalls
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		return llm.FinishLength
	case sdk.StopReasonRefusal:
		return llm.FinishContentFilter
	case sdk.StopReasonPauseTurn:
		return llm.FinishOther
	}
	return llm.FinishOther
}

func invalid(format string, args ...any) error {
	return &llm.Error{Kind: llm.KindInvalidRequest, Provider: ProviderName, Message: fmt.Sprintf(format, args...)}
}

// mapError turns an SDK or transport error into an *llm.Error (or ctx's
// error). The SDK error is not kept: it holds the request.
func mapError(ctx context.Context, w *httpx.Watch, err error) error {
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		return httpx.Failure(ctx, ProviderName, w, err)
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(apiErr.RawJSON()), &body)
	e := &llm.Error{Provider: ProviderName, StatusCode: apiErr.StatusCode, Code: body.Error.Type, Message: body.Error.Message}
	if e.Code == "" {
		e.Code = string(apiErr.Type())
	}
	if apiErr.Response != nil {
		e.RetryAfter = llm.ParseRetryAfter(apiErr.Response.Header, time.Now())
		if e.StatusCode == 0 {
			e.StatusCode = apiErr.Response.StatusCode
		}
	}
	switch e.Code {
	case "authentication_error":
		e.Kind = llm.KindAuthentication
	case "permission_error":
		e.Kind = llm.KindPermission
	case "rate_limit_error":
		e.Kind = llm.KindRateLimit
	case "overloaded_error", "api_error", "timeout_error":
		e.Kind = llm.KindServer
	case "request_too_large":
		e.Kind = llm.KindContextLength
	default:
		e.Kind = llm.KindForStatus(e.StatusCode)
		if e.Kind == llm.KindUnknown {
			e.Kind = llm.KindServer // an in-stream error without a known type
		}
	}
	if (e.Kind == llm.KindInvalidRequest || e.Kind == llm.KindUnknown) && llm.IsContextLengthMessage(e.Message) {
		e.Kind = llm.KindContextLength
	}
	if e.Message == "" {
		e.Message = http.StatusText(e.StatusCode)
	}
	return e
}
