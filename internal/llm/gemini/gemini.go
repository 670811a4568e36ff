package gemini

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/internal/httpx"
)

// ProviderName is the provider name of this adapter, used in llm.Error and
// as the ContentPart.Provider of the raw parts it produces.
const ProviderName = "gemini"

// DefaultBaseURL is the Gemini API root (the SDK adds v1beta/).
const DefaultBaseURL = "https://generativelanguage.googleapis.com/"

// DefaultStreamIdleTimeout ends a stream that sends nothing for this long.
const DefaultStreamIdleTimeout = 2 * time.Minute

// placeholderKey satisfies genai's "API key required" check when no key is
// configured (e.g. behind an authenticating proxy); the Transport then
// drops the x-goog-api-key header so it is never sent.
const placeholderKey = "unused"

// skipSignature is Google's documented placeholder thoughtSignature for
// function calls that did not come from Gemini (e.g. a conversation started
// with another provider), which Gemini 3 otherwise rejects.
var skipSignature = []byte("skip_thought_signature_validator")

// Thinking budgets (Gemini 2.x) and levels (Gemini 3+) by ReasoningEffort.
var (
	thinkingBudgets = map[string]int32{"minimal": 128, "low": 1024, "medium": 8192, "high": 24576}
	thinkingLevels  = map[string]genai.ThinkingLevel{"minimal": genai.ThinkingLevelMinimal, "low": genai.ThinkingLevelLow,
		"medium": genai.ThinkingLevelMedium, "high": genai.ThinkingLevelHigh}
)

// Config configures a Client. Only APIKey and BaseURL are used for
// credentials and endpoint; the environment is never read for them.
type Config struct {
	APIKey string
	// BaseURL is the API root (DefaultBaseURL when empty).
	BaseURL string
	// Model is used when a Request leaves Model empty.
	Model string
	// StreamIdleTimeout ends a stream that sends no bytes for this long
	// with a network error (DefaultStreamIdleTimeout when zero; negative
	// disables it).
	StreamIdleTimeout time.Duration
	HTTPClient        *http.Client
}

// Options are the Request.ProviderOptions["gemini"] settings.
type Options struct {
	// SafetySettings are sent as safetySettings, e.g.
	// [{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","threshold":"BLOCK_NONE"}].
	SafetySettings []*genai.SafetySetting `json:"safety_settings,omitempty"`
	// Thinking forces "level" or "budget"; by default models named
	// gemini-1.x/2.x get a budget and all others a level.
	Thinking string `json:"thinking,omitempty"`
	// ThinkingBudget overrides the budget derived from the effort.
	ThinkingBudget *int32 `json:"thinking_budget,omitempty"`
}

// Client is the Gemini adapter. It is safe for concurrent use.
type Client struct {
	cfg    Config
	models *genai.Models
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	key := cfg.APIKey
	var drop []string
	if key == "" {
		key = placeholderKey
		drop = append(drop, "X-Goog-Api-Key")
	}
	// Backend, APIKey and BaseURL are all explicit, so genai takes none of
	// GOOGLE_API_KEY, GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI or
	// GOOGLE_GEMINI_BASE_URL from the environment. HTTPOptions.RetryOptions
	// stays nil: no SDK retries.
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:      key,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  httpx.Client(cfg.HTTPClient, drop...),
		HTTPOptions: genai.HTTPOptions{BaseURL: cfg.BaseURL},
	})
	if err != nil {
		return nil, fmt.Errorf("create gemini client: %w", err)
	}
	return &Client{cfg: cfg, models: c.Models}, nil
}

// Complete sends req and returns the whole response.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	model, contents, config, err := c.params(req)
	if err != nil {
		return nil, err
	}
	r, err := c.models.GenerateContent(ctx, model, contents, config)
	if err != nil {
		return nil, mapError(ctx, nil, err)
	}
	acc := newAccumulator()
	acc.add(r)
	return acc.response()
}

// Stream sends req and yields its events, ending with EventFinish.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		model, contents, config, err := c.params(req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		w := &httpx.Watch{MaxBytes: maxStreamBytes, Idle: max(c.cfg.StreamIdleTimeout, 0), Quiet: true}
		acc := newAccumulator()
		for r, err := range c.models.GenerateContentStream(httpx.WithWatch(ctx, w), model, contents, config) {
			if err != nil {
				yield(llm.StreamEvent{}, mapError(ctx, w, err))
				return
			}
			for _, ev := range acc.add(r) {
				if !yield(ev, nil) {
					return
				}
			}
		}
		if err := httpx.Failure(ctx, ProviderName, w, nil); err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		if acc.finish == "" {
			yield(llm.StreamEvent{}, httpx.Incomplete(ProviderName))
			return
		}
		resp, err := acc.response()
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		yield(llm.StreamEvent{Type: llm.EventFinish, Response: resp}, nil)
	}
}

// accumulator assembles chunks into a Response. Parts are kept as the
// model sent them (thoughtSignature included); only the fragments of one
// streamed text or thought part (consecutive chunks of the same kind, the
// earlier ones without a signature) are joined, so a streamed response has
// the same parts as a non-streamed one.
type accumulator struct {
	resp    llm.Response
	parts   []*genai.Part
	ids     []string // tool call id per part ("" for other parts)
	finish  genai.FinishReason
	blocked string
	usage   *genai.GenerateContentResponseUsageMetadata
	// grounding is the last groundingMetadata of the candidate: the
	// Google Search grounding (queries, sources, supports).
	grounding *genai.GroundingMetadata
}

func newAccumulator() *accumulator {
	return &accumulator{resp: llm.Response{Message: llm.Message{Role: llm.RoleAssistant}}}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "gemini_" + hex.EncodeToString(b[:])
}

// add folds chunk r in and returns its stream events.
func (a *accumulator) add(r *genai.GenerateContentResponse) []llm.StreamEvent {
	if r == nil {
		return nil
	}
	if r.ResponseID != "" {
		a.resp.ID = r.ResponseID
	}
	if r.ModelVersion != "" {
		a.resp.Model = r.ModelVersion
	}
	if r.UsageMetadata != nil {
		a.usage = r.UsageMetadata
	}
	if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
		a.blocked = string(r.PromptFeedback.BlockReason)
	}
	if len(r.Candidates) == 0 || r.Candidates[0] == nil {
		return nil
	}
	cand := r.Candidates[0]
	if cand.FinishReason != "" {
		a.finish = cand.FinishReason
	}
	var evs []llm.StreamEvent
	if g := cand.GroundingMetadata; g != nil && (len(g.WebSearchQueries) > 0 || len(g.GroundingChunks) > 0) {
		a.grounding = g
		evs = append(evs, llm.StreamEvent{Type: llm.EventWebSearch, WebSearch: webSearch(g)})
	}
	if cand.Content == nil {
		return evs
	}
	for _, p := range cand.Content.Parts {
		if p == nil {
			continue
		}
		switch {
		case p.FunctionCall != nil:
			id := p.FunctionCall.ID
			if id == "" {
				id = newID()
			}
			args := toolArgs(p.FunctionCall.Args)
			a.parts = append(a.parts, p)
			a.ids = append(a.ids, id)
			tc := llm.ToolCall{ID: id, Name: p.FunctionCall.Name, Arguments: args}
			evs = append(evs,
				llm.StreamEvent{Type: llm.EventToolCallStart, ToolCall: &llm.ToolCall{ID: id, Name: tc.Name}},
				llm.StreamEvent{Type: llm.EventToolCallDelta, ToolCall: &llm.ToolCall{ID: id, Name: tc.Name}, Delta: string(args)},
				llm.StreamEvent{Type: llm.EventToolCallEnd, ToolCall: &tc})
		case p.Text != "" || len(p.ThoughtSignature) > 0 || p.Thought:
			if n := len(a.parts); n > 0 {
				last := a.parts[n-1]
				if last.FunctionCall == nil && last.Thought == p.Thought && len(last.ThoughtSignature) == 0 && isPlainText(last) && isPlainText(p) {
					merged := *last
					merged.Text += p.Text
					merged.ThoughtSignature = p.ThoughtSignature
					a.parts[n-1] = &merged
				} else {
					a.parts = append(a.parts, p)
					a.ids = append(a.ids, "")
				}
			} else {
				a.parts = append(a.parts, p)
				a.ids = append(a.ids, "")
			}
			if p.Text != "" {
				typ := llm.EventTextDelta
				if p.Thought {
					typ = llm.EventReasoningDelta
				}
				evs = append(evs, llm.StreamEvent{Type: typ, Delta: p.Text})
			}
		default:
			a.parts = append(a.parts, p) // kept for the echo, not shown
			a.ids = append(a.ids, "")
		}
	}
	return evs
}

// webSearch maps Google Search grounding to the search it ran: its
// queries and the web sources (grounding chunks) it used.
func webSearch(g *genai.GroundingMetadata) *llm.WebSearchCall {
	ws := &llm.WebSearchCall{Queries: append([]string(nil), g.WebSearchQueries...)}
	for _, c := range g.GroundingChunks {
		if c != nil && c.Web != nil {
			ws.Results = append(ws.Results, llm.WebSearchResult{URL: c.Web.URI, Title: c.Web.Title})
		}
	}
	return ws
}

// addGrounding puts the search of g into msg as a PartWebSearch part ahead
// of the first text part, and its supports as citations on the last text
// part (a support's segment is a span of the answer text; Gemini does not
// need the grounding sent back, so the part has no Raw).
func addGrounding(msg *llm.Message, g *genai.GroundingMetadata) {
	var cites []llm.Citation
	for _, s := range g.GroundingSupports {
		if s == nil {
			continue
		}
		text := ""
		if s.Segment != nil {
			text = s.Segment.Text
		}
		for _, i := range s.GroundingChunkIndices {
			if int(i) < len(g.GroundingChunks) && g.GroundingChunks[i] != nil && g.GroundingChunks[i].Web != nil {
				w := g.GroundingChunks[i].Web
				cites = append(cites, llm.Citation{URL: w.URI, Title: w.Title, CitedText: text})
			}
		}
	}
	first, last := -1, -1
	for i, p := range msg.Content {
		if p.Kind == llm.PartText {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if last >= 0 {
		msg.Content[last].Citations = cites
	}
	part := llm.ContentPart{Kind: llm.PartWebSearch, Provider: ProviderName, WebSearch: webSearch(g)}
	if first < 0 {
		msg.Content = append(msg.Content, part)
		return
	}
	msg.Content = append(msg.Content[:first], append([]llm.ContentPart{part}, msg.Content[first:]...)...)
}

// isPlainText reports whether p holds only text (and thought markers).
func isPlainText(p *genai.Part) bool {
	return p.FunctionCall == nil && p.FunctionResponse == nil && p.InlineData == nil && p.FileData == nil &&
		p.ExecutableCode == nil && p.CodeExecutionResult == nil
}

func toolArgs(args map[string]any) json.RawMessage {
	if args == nil {
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(args)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

func (a *accumulator) response() (*llm.Response, error) {
	resp := a.resp
	for i, p := range a.parts {
		raw, err := json.Marshal(p)
		if err != nil {
			return nil, &llm.Error{Kind: llm.KindUnknown, Provider: ProviderName, Message: fmt.Sprintf("encode part: %v", err)}
		}
		part := llm.ContentPart{Provider: ProviderName, Raw: raw}
		switch {
		case p.FunctionCall != nil:
			part.Kind = llm.PartToolCall
			part.ToolCall = &llm.ToolCall{ID: a.ids[i], Name: p.FunctionCall.Name, Arguments: toolArgs(p.FunctionCall.Args)}
		case p.Thought:
			part.Kind, part.Text = llm.PartReasoning, p.Text
		default:
			part.Kind, part.Text = llm.PartText, p.Text
		}
		resp.Message.Content = append(resp.Message.Content, part)
	}
	if g := a.grounding; g != nil {
		addGrounding(&resp.Message, g)
	}
	if u := a.usage; u != nil {
		resp.Usage = llm.Usage{InputTokens: int64(u.PromptTokenCount) + int64(u.ToolUsePromptTokenCount),
			OutputTokens:    int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount),
			ReasoningTokens: int64(u.ThoughtsTokenCount), CacheReadTokens: int64(u.CachedContentTokenCount)}
	}
	switch a.finish {
	case genai.FinishReasonStop, "":
		resp.FinishReason = llm.FinishStop
		if len(resp.ToolCalls()) > 0 {
			resp.FinishReason = llm.FinishToolCalls
		}
	case genai.FinishReasonMaxTokens:
		resp.FinishReason = llm.FinishLength
	case genai.FinishReasonSafety, genai.FinishReasonRecitation, genai.FinishReasonBlocklist, genai.FinishReasonProhibitedContent,
		genai.FinishReasonSPII, genai.FinishReasonImageSafety, genai.FinishReasonImageProhibitedContent:
		resp.FinishReason = llm.FinishContentFilter
	case genai.FinishReasonMalformedFunctionCall, genai.FinishReasonUnexpectedToolCall:
		resp.FinishReason = llm.FinishError
	default:
		resp.FinishReason = llm.FinishOther
	}
	if a.blocked != "" && len(resp.Message.Content) == 0 {
		resp.FinishReason = llm.FinishContentFilter
	}
	return &resp, nil
}

// params builds the model, contents and generation config for req:
// system instruction, tools, tool config, limits and thinking config.
func (c *Client) params(req *llm.Request) (string, []*genai.Content, *genai.GenerateContentConfig, error) {
	var opts Options
	if raw := req.ProviderOptions[ProviderName]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return "", nil, nil, invalid("providerOptions.gemini: %v", err)
		}
	}
	model := cmp.Or(req.Model, c.cfg.Model)
	if model == "" {
		return "", nil, nil, invalid("no model given")
	}
	config := &genai.GenerateContentConfig{SafetySettings: opts.SafetySettings}
	contents, system, err := convertMessages(req.Messages)
	if err != nil {
		return "", nil, nil, err
	}
	if system != "" {
		config.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: system}}}
	}
	if len(req.Tools) > 0 {
		decls, err := functionDeclarations(req.Tools)
		if err != nil {
			return "", nil, nil, err
		}
		config.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
		config.ToolConfig = toolConfig(req.ToolChoice)
	}
	if req.WebSearch != nil {
		tool, err := googleSearchTool(req.WebSearch)
		if err != nil {
			return "", nil, nil, err
		}
		config.Tools = append(config.Tools, tool)
	}
	if req.MaxOutputTokens > 0 {
		config.MaxOutputTokens = int32(req.MaxOutputTokens)
	}
	if effort := strings.ToLower(req.ReasoningEffort); effort != "" && effort != "none" {
		if config.ThinkingConfig, err = thinkingConfig(model, req.ReasoningEffort, opts); err != nil {
			return "", nil, nil, err
		}
	}
	return model, contents, config, nil
}

// functionDeclarations maps the function tools; a tool without parameters
// takes an empty object schema.
func functionDeclarations(tools []llm.ToolDefinition) ([]*genai.FunctionDeclaration, error) {
	var decls []*genai.FunctionDeclaration
	for _, t := range tools {
		var schema any = map[string]any{"type": "object", "properties": map[string]any{}}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &schema); err != nil {
				return nil, invalid("tool %s: parameters: %v", t.Name, err)
			}
		}
		decls = append(decls, &genai.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJsonSchema: schema})
	}
	return decls, nil
}

// toolConfig maps the tool choice to a function calling mode (nil when
// no choice is made).
func toolConfig(choice llm.ToolChoice) *genai.ToolConfig {
	mode := genai.FunctionCallingConfigModeAuto
	switch choice {
	case "":
		return nil
	case llm.ToolChoiceNone:
		mode = genai.FunctionCallingConfigModeNone
	case llm.ToolChoiceRequired:
		mode = genai.FunctionCallingConfigModeAny
	}
	return &genai.ToolConfig{FunctionCallingConfig: &genai.FunctionCallingConfig{Mode: mode}}
}

// googleSearchTool maps the web search options to Google Search
// grounding. The Gemini API's googleSearch tool has no use limit or domain
// filters (excludeDomains is Vertex AI only).
func googleSearchTool(ws *llm.WebSearch) (*genai.Tool, error) {
	switch {
	case ws.MaxUses > 0:
		return nil, invalid("web search: max uses is not an option of Gemini's Google Search grounding")
	case len(ws.AllowedDomains) > 0 || len(ws.BlockedDomains) > 0:
		return nil, invalid("web search: allowed and blocked domains are not options of the Gemini API's Google Search grounding")
	}
	return &genai.Tool{GoogleSearch: &genai.GoogleSearch{}}, nil
}

// thinkingConfig maps a reasoning effort (not none) to a thinking budget
// or level, whichever the options or the model call for.
func thinkingConfig(model, reasoningEffort string, opts Options) (*genai.ThinkingConfig, error) {
	effort := strings.ToLower(reasoningEffort)
	tc := &genai.ThinkingConfig{IncludeThoughts: true}
	if opts.Thinking == "budget" || (opts.Thinking == "" && usesBudget(model)) {
		b, ok := thinkingBudgets[effort]
		if opts.ThinkingBudget != nil {
			b, ok = *opts.ThinkingBudget, true
		}
		if !ok {
			return nil, invalid("reasoning effort %q: want minimal, low, medium or high", reasoningEffort)
		}
		tc.ThinkingBudget = &b
		return tc, nil
	}
	l, ok := thinkingLevels[effort]
	if !ok {
		l = genai.ThinkingLevel(strings.ToUpper(effort)) // passed through
	}
	tc.ThinkingLevel = l
	return tc, nil
}

// usesBudget reports whether model takes a thinking budget (Gemini 1.x and
// 2.x) rather than a thinking level.
func usesBudget(model string) bool {
	m := strings.TrimPrefix(strings.ToLower(model), "models/")
	return strings.HasPrefix(m, "gemini-1") || strings.HasPrefix(m, "gemini-2")
}

// contentBuilder accumulates the contents of a conversation: the function
// calls of the last model content wait for their results, which go into
// one user content in call order, ahead of the user's other parts.
type contentBuilder struct {
	out       []*genai.Content
	system    []string
	calls     []llm.ToolCall // calls of the last model content, in order
	callIDs   []bool         // whether the model sent that call's id
	results   map[string]*llm.ToolResult
	userParts []*genai.Part
}

// convertMessages maps the conversation: system text is returned apart,
// assistant parts are echoed verbatim when they came from Gemini, and tool
// results are gathered into one user content in call order.
func convertMessages(msgs []llm.Message) ([]*genai.Content, string, error) {
	b := &contentBuilder{results: map[string]*llm.ToolResult{}}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			if t := m.Text(); t != "" {
				b.system = append(b.system, t)
			}
		case llm.RoleUser, llm.RoleTool:
			b.user(m)
		case llm.RoleAssistant:
			b.flush()
			if err := b.model(m); err != nil {
				return nil, "", err
			}
		}
	}
	b.flush()
	return b.out, strings.Join(b.system, "\n\n"), nil
}

// flush writes the waiting user content: a function response for every
// call of the last model content, then the user's parts.
func (b *contentBuilder) flush() {
	if len(b.calls) == 0 && len(b.userParts) == 0 {
		return
	}
	var parts []*genai.Part
	for i, tc := range b.calls {
		parts = append(parts, &genai.Part{FunctionResponse: functionResponse(tc, b.callIDs[i], b.results[tc.ID])})
	}
	parts = append(parts, b.userParts...)
	if len(parts) > 0 {
		b.out = append(b.out, &genai.Content{Role: genai.RoleUser, Parts: parts})
	}
	b.calls, b.callIDs, b.userParts = nil, nil, nil
	b.results = map[string]*llm.ToolResult{}
}

// functionResponse answers tc with r (an error when r is nil); the id is
// sent only when the model sent one.
func functionResponse(tc llm.ToolCall, withID bool, r *llm.ToolResult) *genai.FunctionResponse {
	fr := &genai.FunctionResponse{Name: tc.Name}
	if withID {
		fr.ID = tc.ID
	}
	switch {
	case r == nil:
		fr.Response = map[string]any{"error": "tool call was not executed"}
		return fr
	case r.IsError:
		fr.Response = map[string]any{"error": r.Content}
	default:
		fr.Response = map[string]any{"output": r.Content}
	}
	for _, img := range r.Images {
		fr.Parts = append(fr.Parts, &genai.FunctionResponsePart{InlineData: &genai.FunctionResponseBlob{MIMEType: img.MediaType, Data: img.Data}})
	}
	return fr
}

// user gathers a user or tool message: results by call id, other parts
// into the waiting user content.
func (b *contentBuilder) user(m llm.Message) {
	for _, p := range m.Content {
		switch p.Kind {
		case llm.PartToolResult:
			if p.ToolResult != nil {
				b.results[p.ToolResult.CallID] = p.ToolResult
			}
		case llm.PartText:
			if p.Text != "" {
				b.userParts = append(b.userParts, &genai.Part{Text: p.Text})
			}
		case llm.PartImage:
			if p.Image != nil {
				b.userParts = append(b.userParts, &genai.Part{InlineData: &genai.Blob{MIMEType: p.Image.MediaType, Data: p.Image.Data}})
			}
		}
	}
}

// model adds an assistant message as a model content: Gemini's own parts
// verbatim, others rebuilt. The first rebuilt function call carries the
// skip signature unless a Gemini call already carries a signature.
func (b *contentBuilder) model(m llm.Message) error {
	var parts []*genai.Part
	signed := false
	for _, p := range m.Content {
		if p.Provider == ProviderName && len(p.Raw) > 0 {
			var part genai.Part
			if err := json.Unmarshal(p.Raw, &part); err != nil {
				return invalid("gemini part: %v", err)
			}
			if part.FunctionCall != nil && p.ToolCall != nil {
				b.addCall(*p.ToolCall, part.FunctionCall.ID != "")
				signed = signed || len(part.ThoughtSignature) > 0
			}
			parts = append(parts, &part)
			continue
		}
		switch p.Kind {
		case llm.PartText:
			if p.Text != "" {
				parts = append(parts, &genai.Part{Text: p.Text})
			}
		case llm.PartToolCall:
			if p.ToolCall == nil {
				continue
			}
			part := functionCallPart(p.ToolCall)
			if !signed {
				part.ThoughtSignature = skipSignature
				signed = true
			}
			b.addCall(*p.ToolCall, true)
			parts = append(parts, part)
		}
	}
	if len(parts) > 0 {
		b.out = append(b.out, &genai.Content{Role: genai.RoleModel, Parts: parts})
	}
	return nil
}

// addCall records a call of the model content being built.
func (b *contentBuilder) addCall(tc llm.ToolCall, withID bool) {
	b.calls = append(b.calls, tc)
	b.callIDs = append(b.callIDs, withID)
}

// functionCallPart is the function call part of tc; arguments that are
// not a JSON object become an empty one.
func functionCallPart(tc *llm.ToolCall) *genai.Part {
	var args map[string]any
	if len(tc.Arguments) > 0 && json.Unmarshal(tc.Arguments, &args) != nil {
		args = map[string]any{}
	}
	return &genai.Part{FunctionCall: &genai.FunctionCall{ID: tc.ID, Name: tc.Name, Args: args}}
}

func invalid(format string, args ...any) error {
	return &llm.Error{Kind: llm.KindInvalidRequest, Provider: ProviderName, Message: fmt.Sprintf(format, args...)}
}

// mapError turns a genai or transport error into an *llm.Error (or ctx's
// error).
func mapError(ctx context.Context, w *httpx.Watch, err error) error {
	var apiErr genai.APIError
	var apiErrPtr *genai.APIError
	switch {
	case errors.As(err, &apiErr):
	case errors.As(err, &apiErrPtr):
		apiErr = *apiErrPtr
	default:
		return httpx.Failure(ctx, ProviderName, w, err)
	}
	e := &llm.Error{Provider: ProviderName, StatusCode: apiErr.Code, Code: apiErr.Status, Message: apiErr.Message}
	for _, d := range apiErr.Details {
		if t, _ := d["@type"].(string); strings.HasSuffix(t, "google.rpc.RetryInfo") {
			if s, _ := d["retryDelay"].(string); s != "" {
				if dur, err := time.ParseDuration(s); err == nil {
					e.RetryAfter = dur
				}
			}
		}
	}
	switch apiErr.Status {
	case "UNAUTHENTICATED":
		e.Kind = llm.KindAuthentication
	case "PERMISSION_DENIED":
		e.Kind = llm.KindPermission
	case "RESOURCE_EXHAUSTED":
		e.Kind = llm.KindRateLimit
	case "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED":
		e.Kind = llm.KindServer
	default:
		e.Kind = llm.KindForStatus(apiErr.Code)
		if e.Kind == llm.KindUnknown {
			e.Kind = llm.KindServer // an in-stream error without a status
		}
	}
	if e.Kind == llm.KindInvalidRequest {
		switch {
		case strings.Contains(e.Message, "API key not valid"):
			e.Kind = llm.KindAuthentication
		case llm.IsContextLengthMessage(e.Message):
			e.Kind = llm.KindContextLength
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(e.StatusCode)
	}
	return e
}
