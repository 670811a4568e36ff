package openai

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/internal/httpx"
)

// ProviderName is the provider name of the Responses client, used in
// llm.Error and as the ContentPart.Provider of the raw items it produces.
const ProviderName = "openai"

// DefaultBaseURL is the OpenAI API base, including /v1.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultStreamIdleTimeout ends a stream that sends nothing for this long.
const DefaultStreamIdleTimeout = 2 * time.Minute

// Config configures a Client or a CompatClient. Only APIKey and BaseURL are
// used for credentials and endpoint; the environment is never read.
type Config struct {
	// APIKey is sent as a bearer token; empty sends no Authorization.
	APIKey string
	// BaseURL includes the version path, e.g. http://vllm:8000/v1
	// (DefaultBaseURL when empty).
	BaseURL string
	// Model is used when a Request leaves Model empty.
	Model string
	// StreamIdleTimeout ends a stream that sends no bytes for this long
	// with a network error (DefaultStreamIdleTimeout when zero; negative
	// disables it).
	StreamIdleTimeout time.Duration
	HTTPClient        *http.Client
}

// Options are the Request.ProviderOptions["openai"] settings of the
// Responses client.
type Options struct {
	// Store keeps responses on OpenAI's side (default false: stateless).
	Store bool `json:"store,omitempty"`
	// ReasoningSummary is reasoning.summary when an effort is set
	// (default "auto"; "none" sends no summary request).
	ReasoningSummary string `json:"reasoning_summary,omitempty"`
	// Strict sets strict on every function tool (default false, set
	// explicitly).
	Strict bool `json:"strict,omitempty"`
	// PromptCacheKey is sent as prompt_cache_key in place of
	// Request.CacheKey.
	PromptCacheKey string `json:"prompt_cache_key,omitempty"`
}

func (cfg *Config) defaults() {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
}

// requestOptions builds the SDK options from cfg alone. The services are
// created directly (not through openai.NewClient, whose defaults read
// OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_PROJECT_ID and
// OPENAI_CUSTOM_HEADERS from the environment).
func requestOptions(cfg Config) []option.RequestOption {
	drop := []string{}
	if cfg.APIKey == "" {
		drop = append(drop, "Authorization")
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(httpx.Client(cfg.HTTPClient, drop...)),
		option.WithBaseURL(cfg.BaseURL),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return opts
}

// Client is the OpenAI Responses adapter. It is safe for concurrent use.
type Client struct {
	cfg Config
	svc responses.ResponseService
}

// New returns a Responses client for cfg.
func New(cfg Config) (*Client, error) {
	cfg.defaults()
	return &Client{cfg: cfg, svc: responses.NewResponseService(requestOptions(cfg)...)}, nil
}

// Complete sends req and returns the whole response.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	p, err := c.params(req)
	if err != nil {
		return nil, err
	}
	r, err := c.svc.New(ctx, p)
	if err != nil {
		return nil, mapError(ctx, ProviderName, nil, err)
	}
	if r.Status == "failed" {
		return nil, streamError(ProviderName, string(r.Error.Code), r.Error.Message)
	}
	return convertResponse(r)
}

// Stream sends req and yields its events, ending with EventFinish.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		p, err := c.params(req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		w := &httpx.Watch{MaxBytes: maxStreamBytes, Idle: max(c.cfg.StreamIdleTimeout, 0)}
		stream := c.svc.NewStreaming(httpx.WithWatch(ctx, w), p)
		defer stream.Close()
		calls := map[string]*llm.ToolCall{} // by item id
		for stream.Next() {
			ev := stream.Current()
			var out *llm.StreamEvent
			switch ev.Type {
			case "response.output_text.delta":
				out = &llm.StreamEvent{Type: llm.EventTextDelta, Delta: ev.Delta}
			case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
				out = &llm.StreamEvent{Type: llm.EventReasoningDelta, Delta: ev.Delta}
			case "response.output_item.added":
				var it outputItem
				if json.Unmarshal([]byte(ev.Item.RawJSON()), &it) == nil && it.Type == "function_call" {
					tc := &llm.ToolCall{ID: it.CallID, Name: it.Name}
					calls[it.ID] = tc
					out = &llm.StreamEvent{Type: llm.EventToolCallStart, ToolCall: &llm.ToolCall{ID: tc.ID, Name: tc.Name}}
				}
			case "response.function_call_arguments.delta":
				if tc := calls[ev.ItemID]; tc != nil {
					out = &llm.StreamEvent{Type: llm.EventToolCallDelta, ToolCall: &llm.ToolCall{ID: tc.ID, Name: tc.Name}, Delta: ev.Delta}
				}
			case "response.output_item.done":
				var it outputItem
				if json.Unmarshal([]byte(ev.Item.RawJSON()), &it) == nil {
					switch it.Type {
					case "function_call":
						out = &llm.StreamEvent{Type: llm.EventToolCallEnd, ToolCall: &llm.ToolCall{ID: it.CallID, Name: it.Name, Arguments: arguments(it.Arguments)}}
					case "web_search_call":
						out = &llm.StreamEvent{Type: llm.EventWebSearch, WebSearch: it.webSearch()}
					}
				}
			case "response.completed", "response.incomplete":
				resp, err := convertResponse(&ev.Response)
				if err != nil {
					yield(llm.StreamEvent{}, err)
					return
				}
				yield(llm.StreamEvent{Type: llm.EventFinish, Response: resp}, nil)
				return
			case "response.failed":
				yield(llm.StreamEvent{}, streamError(ProviderName, string(ev.Response.Error.Code), ev.Response.Error.Message))
				return
			case "error":
				yield(llm.StreamEvent{}, streamError(ProviderName, ev.Code, ev.Message))
				return
			}
			if out != nil && !yield(*out, nil) {
				return
			}
		}
		if err := stream.Err(); err != nil {
			yield(llm.StreamEvent{}, mapError(ctx, ProviderName, w, err))
			return
		}
		if err := httpx.Failure(ctx, ProviderName, w, nil); err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		yield(llm.StreamEvent{}, httpx.Incomplete(ProviderName))
	}
}

// outputItem is the part of a Responses output item the adapter reads.
type outputItem struct {
	Type             string `json:"type"`
	ID               string `json:"id"`
	CallID           string `json:"call_id"`
	Name             string `json:"name"`
	Arguments        string `json:"arguments"`
	EncryptedContent string `json:"encrypted_content"`
	Summary          []struct {
		Text string `json:"text"`
	} `json:"summary"`
	Content []struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Refusal     string `json:"refusal"`
		Annotations []struct {
			Type       string `json:"type"`
			URL        string `json:"url"`
			Title      string `json:"title"`
			StartIndex int    `json:"start_index"`
			EndIndex   int    `json:"end_index"`
		} `json:"annotations"`
	} `json:"content"`
	// Status and Action are those of a web_search_call item.
	Status string `json:"status"`
	Action struct {
		Type    string   `json:"type"`
		Query   string   `json:"query"`
		Queries []string `json:"queries"`
		URL     string   `json:"url"`
		Sources []struct {
			URL string `json:"url"`
		} `json:"sources"`
	} `json:"action"`
}

// webSearch maps a web_search_call item. Its results are the action's
// sources (URLs only: the API gives no titles there), present because the
// adapter asks for web_search_call.action.sources.
func (it *outputItem) webSearch() *llm.WebSearchCall {
	ws := &llm.WebSearchCall{ID: it.ID}
	switch {
	case len(it.Action.Queries) > 0:
		ws.Queries = append(ws.Queries, it.Action.Queries...)
	case it.Action.Query != "":
		ws.Queries = []string{it.Action.Query}
	}
	for _, src := range it.Action.Sources {
		ws.Results = append(ws.Results, llm.WebSearchResult{URL: src.URL})
	}
	if it.Action.Type == "open_page" && it.Action.URL != "" {
		ws.Results = append(ws.Results, llm.WebSearchResult{URL: it.Action.URL})
	}
	if it.Status == "failed" {
		ws.Error = "failed"
	}
	return ws
}

// citedSpan is text[start:end] in characters, clamped to the text.
func citedSpan(text string, start, end int) string {
	r := []rune(text)
	start, end = max(start, 0), min(end, len(r))
	if start >= end {
		return ""
	}
	return string(r[start:end])
}

func arguments(s string) json.RawMessage {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s)
}

func convertResponse(r *responses.Response) (*llm.Response, error) {
	resp := &llm.Response{ID: r.ID, Model: string(r.Model), Message: llm.Message{Role: llm.RoleAssistant}}
	refused := false
	for _, item := range r.Output {
		raw := json.RawMessage(item.RawJSON())
		var it outputItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: fmt.Sprintf("decode output item: %v", err)}
		}
		raw = append(json.RawMessage(nil), raw...)
		switch it.Type {
		case "message":
			var b strings.Builder
			var cites []llm.Citation
			for _, c := range it.Content {
				for _, a := range c.Annotations {
					if a.Type == "url_citation" {
						cites = append(cites, llm.Citation{URL: a.URL, Title: a.Title, CitedText: citedSpan(c.Text, a.StartIndex, a.EndIndex)})
					}
				}
				b.WriteString(c.Text)
				if c.Refusal != "" {
					b.WriteString(c.Refusal)
					refused = true
				}
			}
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartText, Text: b.String(), Citations: cites, Provider: ProviderName, Raw: raw})
		case "web_search_call":
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartWebSearch, WebSearch: it.webSearch(), Provider: ProviderName, Raw: raw})
		case "reasoning":
			var b strings.Builder
			for _, s := range it.Summary {
				b.WriteString(s.Text)
			}
			for _, c := range it.Content {
				b.WriteString(c.Text)
			}
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartReasoning, Text: b.String(), Provider: ProviderName, Raw: raw})
		case "function_call":
			resp.Message.Content = append(resp.Message.Content, llm.ContentPart{Kind: llm.PartToolCall, Provider: ProviderName, Raw: raw,
				ToolCall: &llm.ToolCall{ID: it.CallID, Name: it.Name, Arguments: arguments(it.Arguments)}})
		}
	}
	u := r.Usage
	resp.Usage = llm.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		ReasoningTokens: u.OutputTokensDetails.ReasoningTokens, CacheReadTokens: u.InputTokensDetails.CachedTokens}
	switch {
	case r.Status == "incomplete" && r.IncompleteDetails.Reason == "content_filter":
		resp.FinishReason = llm.FinishContentFilter
	case r.Status == "incomplete":
		resp.FinishReason = llm.FinishLength
	case refused:
		resp.FinishReason = llm.FinishContentFilter
	case len(resp.ToolCalls()) > 0:
		resp.FinishReason = llm.FinishToolCalls
	default:
		resp.FinishReason = llm.FinishStop
	}
	return resp, nil
}

// params builds the Responses request for req: the conversation as input
// items, then tools, tool choice, reasoning and limits.
func (c *Client) params(req *llm.Request) (responses.ResponseNewParams, error) {
	var opts Options
	if raw := req.ProviderOptions[ProviderName]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return responses.ResponseNewParams{}, invalid(ProviderName, "providerOptions.openai: %v", err)
		}
	}
	model := cmp.Or(req.Model, c.cfg.Model)
	if model == "" {
		return responses.ResponseNewParams{}, invalid(ProviderName, "no model given")
	}
	p := responses.ResponseNewParams{Model: shared.ResponsesModel(model), Store: param.NewOpt(opts.Store)}
	if !opts.Store {
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	system, input := responsesInput(req.Messages, opts.Store)
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	if len(system) > 0 {
		p.Instructions = param.NewOpt(strings.Join(system, "\n\n"))
	}
	tools, err := responsesTools(req.Tools, opts.Strict)
	if err != nil {
		return responses.ResponseNewParams{}, err
	}
	p.Tools = tools
	if req.WebSearch != nil {
		tool, err := responsesWebSearch(req.WebSearch)
		if err != nil {
			return responses.ResponseNewParams{}, err
		}
		p.Tools = append(p.Tools, tool)
		p.Include = append(p.Include, responses.ResponseIncludableWebSearchCallActionSources)
	}
	if len(req.Tools) > 0 {
		p.ParallelToolCalls = param.NewOpt(req.ParallelToolCalls == nil || *req.ParallelToolCalls)
		p.ToolChoice = responsesToolChoice(req.ToolChoice)
	}
	if effort := strings.ToLower(req.ReasoningEffort); effort != "" {
		p.Reasoning = responsesReasoning(effort, opts.ReasoningSummary)
	}
	if req.MaxOutputTokens > 0 {
		p.MaxOutputTokens = param.NewOpt(int64(req.MaxOutputTokens))
	}
	if key := cmp.Or(opts.PromptCacheKey, req.CacheKey); key != "" {
		p.PromptCacheKey = param.NewOpt(key)
	}
	return p, nil
}

// inputBuilder accumulates the input items of a conversation. Every
// function call of an assistant turn that has no output by the next turn
// gets an error output, so the API accepts the history.
type inputBuilder struct {
	store    bool // responses are stored: reasoning items resolve by id
	system   []string
	input    responses.ResponseInputParam
	pending  []string // call ids of the last assistant turn
	answered map[string]bool
}

// responsesInput maps the conversation: system text apart (instructions),
// every other message as input items.
func responsesInput(msgs []llm.Message, store bool) ([]string, responses.ResponseInputParam) {
	b := &inputBuilder{store: store, answered: map[string]bool{}}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			if t := m.Text(); t != "" {
				b.system = append(b.system, t)
			}
		case llm.RoleUser, llm.RoleTool:
			b.user(m)
		case llm.RoleAssistant:
			b.closeCalls()
			for _, part := range m.Content {
				b.assistantPart(part)
			}
		}
	}
	b.closeCalls()
	return b.system, b.input
}

// closeCalls answers the pending calls that have no output.
func (b *inputBuilder) closeCalls() {
	for _, id := range b.pending {
		if !b.answered[id] {
			b.input = append(b.input, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: param.NewOpt(id), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: param.NewOpt("error: tool call was not executed")}}})
		}
	}
	b.pending = nil
	b.answered = map[string]bool{}
}

// user adds a user or tool message: tool results as function call
// outputs, text and images as one user message.
func (b *inputBuilder) user(m llm.Message) {
	var parts responses.ResponseInputMessageContentListParam
	for _, part := range m.Content {
		switch part.Kind {
		case llm.PartToolResult:
			if part.ToolResult == nil {
				continue
			}
			b.answered[part.ToolResult.CallID] = true
			b.input = append(b.input, functionOutput(part.ToolResult))
		case llm.PartText:
			parts = append(parts, responses.ResponseInputContentParamOfInputText(part.Text))
		case llm.PartImage:
			if part.Image != nil {
				parts = append(parts, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
					Detail: responses.ResponseInputImageDetailAuto, ImageURL: param.NewOpt(dataURL(part.Image))}})
			}
		}
	}
	if len(parts) > 0 {
		b.closeCalls()
		b.input = append(b.input, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
			Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: parts}}})
	}
}

// assistantPart adds one assistant part: this provider's output items
// verbatim, other text and tool calls rebuilt.
func (b *inputBuilder) assistantPart(part llm.ContentPart) {
	if part.Provider == ProviderName && len(part.Raw) > 0 {
		if part.Kind == llm.PartReasoning && !b.store {
			var it outputItem
			if json.Unmarshal(part.Raw, &it) != nil || it.EncryptedContent == "" {
				return // cannot be resolved without store
			}
		}
		b.input = append(b.input, param.Override[responses.ResponseInputItemUnionParam](part.Raw))
		if part.Kind == llm.PartToolCall && part.ToolCall != nil {
			b.pending = append(b.pending, part.ToolCall.ID)
		}
		return
	}
	switch part.Kind {
	case llm.PartText:
		if part.Text != "" {
			b.input = append(b.input, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
				Role: responses.EasyInputMessageRoleAssistant, Content: responses.EasyInputMessageContentUnionParam{OfString: param.NewOpt(part.Text)}}})
		}
	case llm.PartToolCall:
		if part.ToolCall == nil {
			return
		}
		b.input = append(b.input, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
			CallID: part.ToolCall.ID, Name: part.ToolCall.Name, Arguments: string(arguments(string(part.ToolCall.Arguments)))}})
		b.pending = append(b.pending, part.ToolCall.ID)
	}
}

// toolSchema is a tool's parameters as a JSON object, an empty object
// schema when it has none.
func toolSchema(provider string, t llm.ToolDefinition) (map[string]any, error) {
	if len(t.Parameters) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var schema map[string]any
	if err := json.Unmarshal(t.Parameters, &schema); err != nil {
		return nil, invalid(provider, "tool %s: parameters: %v", t.Name, err)
	}
	return schema, nil
}

// responsesTools maps the function tools.
func responsesTools(defs []llm.ToolDefinition, strict bool) ([]responses.ToolUnionParam, error) {
	var tools []responses.ToolUnionParam
	for _, t := range defs {
		schema, err := toolSchema(ProviderName, t)
		if err != nil {
			return nil, err
		}
		fn := &responses.FunctionToolParam{Name: t.Name, Parameters: schema, Strict: param.NewOpt(strict)}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		tools = append(tools, responses.ToolUnionParam{OfFunction: fn})
	}
	return tools, nil
}

// responsesWebSearch maps the web search options to the web_search tool,
// refusing the options it does not have.
func responsesWebSearch(ws *llm.WebSearch) (responses.ToolUnionParam, error) {
	if ws.MaxUses > 0 {
		return responses.ToolUnionParam{}, invalid(ProviderName, "web search: max uses is not an option of OpenAI's web_search tool")
	}
	if len(ws.BlockedDomains) > 0 {
		return responses.ToolUnionParam{}, invalid(ProviderName, "web search: blocked domains are not an option of OpenAI's web_search tool (use allowed domains)")
	}
	return responses.ToolUnionParam{OfWebSearch: &responses.WebSearchToolParam{
		Type: responses.WebSearchToolTypeWebSearch, Filters: responses.WebSearchToolFiltersParam{AllowedDomains: ws.AllowedDomains}}}, nil
}

// responsesToolChoice maps the tool choice (unset when choice is empty).
func responsesToolChoice(choice llm.ToolChoice) responses.ResponseNewParamsToolChoiceUnion {
	var mode responses.ToolChoiceOptions
	switch choice {
	case llm.ToolChoiceNone:
		mode = responses.ToolChoiceOptionsNone
	case llm.ToolChoiceRequired:
		mode = responses.ToolChoiceOptionsRequired
	case llm.ToolChoiceAuto:
		mode = responses.ToolChoiceOptionsAuto
	default:
		return responses.ResponseNewParamsToolChoiceUnion{}
	}
	return responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(mode)}
}

// responsesReasoning is the reasoning config for a lower-case effort, with
// a summary ("auto" unless summary says otherwise; none for "none").
func responsesReasoning(effort, summary string) shared.ReasoningParam {
	r := shared.ReasoningParam{Effort: shared.ReasoningEffort(effort)}
	summary = cmp.Or(summary, "auto")
	if summary != "none" && effort != "none" {
		r.Summary = shared.ReasoningSummary(summary)
	}
	return r
}

func functionOutput(r *llm.ToolResult) responses.ResponseInputItemUnionParam {
	out := responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: param.NewOpt(r.Content)}
	if len(r.Images) > 0 {
		list := responses.ResponseFunctionCallOutputItemListParam{}
		if r.Content != "" {
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{OfInputText: &responses.ResponseInputTextContentParam{Text: r.Content}})
		}
		for i := range r.Images {
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{OfInputImage: &responses.ResponseInputImageContentParam{
				ImageURL: param.NewOpt(dataURL(&r.Images[i]))}})
		}
		out = responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfResponseFunctionCallOutputItemArray: list}
	}
	return responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
		CallID: param.NewOpt(r.CallID), Output: out}}
}

func dataURL(img *llm.Image) string {
	return "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}

func invalid(provider, format string, args ...any) error {
	return &llm.Error{Kind: llm.KindInvalidRequest, Provider: provider, Message: fmt.Sprintf(format, args...)}
}
