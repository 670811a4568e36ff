package loop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Defaults of context accounting and compaction (seeds 001 and 004).
const (
	// DefaultCompactionThreshold is the share of the history budget
	// (window - system prompt - reserve), in percent, above which history
	// is compacted before the next model call.
	DefaultCompactionThreshold = 70
	// DefaultCompactionReserve is the number of tokens kept free for the
	// model's answer.
	DefaultCompactionReserve = 4096
	// compactionSummaryTokens bounds the summary the compaction call writes.
	compactionSummaryTokens = 4096
	// charsPerToken is the estimate of seed 000 §5.5 (1 token ~ 4 characters).
	charsPerToken = 4
)

// CompactionPrompt is the system prompt of the summary call. Tests (and
// wire servers) recognise a compaction request by it.
const CompactionPrompt = "You compact the history of a coding agent's session. Summarise the conversation transcript " +
	"the user gives you so the agent can continue the task without it: the user's task and constraints, " +
	"decisions made, files read and changed (with paths), commands run and their outcome, errors met and how " +
	"they were solved, and what remains to be done. Be factual and concise; answer with the summary only."

// CompactionConfig configures context accounting and compaction. The zero
// value compacts at the defaults when the context window is known.
type CompactionConfig struct {
	// Disabled turns compaction off: requests then grow until the provider
	// rejects them, which closes the session.
	Disabled bool
	// ContextWindow overrides the profile's context window in tokens
	// (0 = the profile's, from its table of known models).
	ContextWindow int
	// ThresholdPercent is the share of the history budget that triggers
	// compaction (0 = DefaultCompactionThreshold).
	ThresholdPercent int
	// ReserveTokens are kept free for the answer (0 = DefaultCompactionReserve).
	ReserveTokens int
	// Model is the model of the summary call ("" = the session's model).
	// The call goes through the client given with WithCompactionClient,
	// or the session's client.
	Model string
}

func (c *CompactionConfig) validate() error {
	switch {
	case c.ContextWindow < 0:
		return fmt.Errorf("context window %d is negative", c.ContextWindow)
	case c.ThresholdPercent < 0 || c.ThresholdPercent >= 100:
		return fmt.Errorf("compaction threshold %d%% must be between 1 and 99 (0 for the default)", c.ThresholdPercent)
	case c.ReserveTokens < 0:
		return fmt.Errorf("compaction reserve %d is negative", c.ReserveTokens)
	}
	if c.ThresholdPercent == 0 {
		c.ThresholdPercent = DefaultCompactionThreshold
	}
	if c.ReserveTokens == 0 {
		c.ReserveTokens = DefaultCompactionReserve
	}
	return nil
}

// ContextUsage is the context accounting reported with ASSISTANT_TEXT_END.
type ContextUsage struct {
	// Window is the model's context window in tokens (0 = unknown).
	Window int `json:"window,omitempty"`
	// RequestTokens is the size of the request the response answered: the
	// provider's input tokens, or the estimate when it reported none.
	RequestTokens int64 `json:"requestTokens"`
}

// Compaction describes one compaction (CONTEXT_COMPACTED). Restore replaces
// the first Turns turns of history with one SummaryTurn holding Summary.
type Compaction struct {
	TokensBefore int `json:"tokensBefore"`
	TokensAfter  int `json:"tokensAfter"`
	// Turns is the number of history turns replaced by the summary.
	Turns int `json:"turns"`
	// Summary is the content of the SummaryTurn that replaced them.
	Summary string `json:"summary"`
	// Dropped is set when the summary call failed and the turns were
	// dropped with only a note left in their place; Error says why.
	Dropped bool   `json:"dropped,omitempty"`
	Error   string `json:"error,omitempty"`
	// Forced is set for a compaction made after the provider rejected a
	// request as too long.
	Forced bool `json:"forced,omitempty"`
	// Model is the model that wrote the summary.
	Model string `json:"model,omitempty"`
}

// SummaryTurn replaces compacted history; the model sees it as a user
// message.
type SummaryTurn struct {
	Content   string
	Timestamp time.Time
}

// When implements Turn.
func (t *SummaryTurn) When() time.Time { return t.Timestamp }

func (t *SummaryTurn) messages() []llm.Message {
	return []llm.Message{llm.TextMessage(llm.RoleUser, t.Content)}
}

func (t *SummaryTurn) size() int { return len(t.Content) }

// WithCompactionClient makes summary calls go through c instead of the
// session's client (e.g. a cheaper model of another provider; set
// CompactionConfig.Model to its model).
func WithCompactionClient(c Client) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("nil compaction client")
		}
		o.compactClient = c
		return nil
	}
}

// contextWindow is the configured or the profile's context window.
func (s *Session) contextWindow() int {
	if w := s.cfg.Compaction.ContextWindow; w > 0 {
		return w
	}
	return s.profile.Capabilities().ContextWindow
}

// requestChars returns the characters of req's fixed part (system messages
// and tool definitions) and of the whole request.
func requestChars(req *llm.Request) (fixed, total int) {
	for _, d := range req.Tools {
		fixed += len(d.Name) + len(d.Description) + len(d.Parameters)
	}
	total = fixed
	for _, m := range req.Messages {
		n := messageChars(m)
		if m.Role == llm.RoleSystem {
			fixed += n
		}
		total += n
	}
	return fixed, total
}

func messageChars(m llm.Message) int {
	n := 0
	for _, p := range m.Content {
		switch {
		case p.ToolCall != nil:
			n += len(p.ToolCall.Name) + len(p.ToolCall.Arguments)
		case p.ToolResult != nil:
			n += len(p.ToolResult.Content)
		case p.Text != "":
			n += len(p.Text)
		default:
			n += len(p.Raw) // opaque items (encrypted reasoning) are sent back too
		}
	}
	return n
}

// estimateTokens estimates the tokens of a request of total characters: the
// input tokens the provider reported for the last request plus an estimate
// of what changed since, or characters / 4 when there is no report.
func (s *Session) estimateTokens(total int) int {
	s.mu.Lock()
	last, lastChars := s.ctxLastInput, s.ctxLastChars
	s.mu.Unlock()
	if last <= 0 {
		return total / charsPerToken
	}
	return max(0, int(last)+(total-lastChars)/charsPerToken)
}

// noteUsage records the provider's input tokens for a request of chars
// characters, and returns the request size to report.
func (s *Session) noteUsage(chars int, u llm.Usage) int64 {
	est := int64(s.estimateTokens(chars))
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.InputTokens <= 0 {
		s.ctxLastInput, s.ctxLastChars = 0, 0
		return est
	}
	s.ctxLastInput, s.ctxLastChars = u.InputTokens, chars
	return u.InputTokens
}

// maybeCompact compacts history when req, the next request (request),
// would exceed the threshold, or unconditionally when forced (after a
// context-length error). It reports whether history changed; the caller
// then builds the request again. A failed summary call never fails the
// session (the old turns are dropped instead); only a cancelled ctx or a
// journal error is returned.
func (s *Session) maybeCompact(ctx context.Context, req *llm.Request, forced bool) (bool, error) {
	if s.cfg.Compaction.Disabled {
		return false, nil
	}
	fixedChars, total := requestChars(req)
	before := s.estimateTokens(total)
	fixed := fixedChars / charsPerToken
	window := s.contextWindow()
	var keep int
	if window > 0 {
		budget := window - fixed - s.cfg.Compaction.ReserveTokens
		if budget < window/4 {
			budget = window / 4 // a huge system prompt still leaves room to compact into
		}
		threshold := s.cfg.Compaction.ThresholdPercent
		if !forced && (before-fixed)*100 < budget*threshold {
			return false, nil
		}
		keep = budget * (100 - threshold) / 100
	}
	if forced {
		// Keep at most a quarter of the history there is: the provider
		// said the request does not fit, whatever our estimate says.
		quarter := (before - fixed) / 4
		if keep == 0 || quarter < keep {
			keep = quarter
		}
	}
	return s.compact(ctx, keep*charsPerToken, before, forced)
}

// compact replaces the turns before the split point with one summary.
func (s *Session) compact(ctx context.Context, keepChars, before int, forced bool) (bool, error) {
	s.mu.Lock()
	hist := slices.Clone(s.history)
	s.mu.Unlock()
	cut := splitPoint(hist, keepChars)
	if cut <= 0 {
		return false, nil
	}
	start := s.now()
	old := hist[:cut]
	info := Compaction{Turns: cut, TokensBefore: before, Forced: forced}
	summary, model, err := s.summarize(ctx, old)
	if err != nil && ctx.Err() != nil {
		return false, ctx.Err()
	}
	info.Model = model
	if err != nil {
		info.Dropped, info.Error = true, err.Error()
		info.Summary = fmt.Sprintf("[Earlier conversation removed: %d turns were dropped to fit the context window "+
			"(summarizing them failed).]", cut)
	} else {
		info.Summary = "[Previous conversation summary: " + summary + "]"
	}
	if req := lastUserRequest(old); req != "" {
		info.Summary += "\n\nThe user's most recent request, verbatim:\n" + clip(req, 8000)
	}
	s.applyCompaction(cut, &SummaryTurn{Content: info.Summary, Timestamp: s.now()})
	_, total := requestChars(s.request())
	info.TokensAfter = total / charsPerToken
	if err := s.emitSync(ctx, EventContextCompacted, EventData{Compaction: &info,
		DurationMs: s.now().Sub(start).Milliseconds()}); err != nil {
		return true, err
	}
	return true, nil
}

// applyCompaction replaces history[:cut] with summary. The provider's last
// input-token report no longer describes the history, so it is forgotten.
func (s *Session) applyCompaction(cut int, summary *SummaryTurn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaceHistoryLocked(cut, summary)
	s.ctxLastInput, s.ctxLastChars = 0, 0
}

func (s *Session) replaceHistoryLocked(cut int, summary *SummaryTurn) {
	rest := s.history[cut:]
	s.history = append([]Turn{summary}, rest...)
	s.historyChars = 0
	for _, t := range s.history {
		s.historyChars += t.size()
	}
}

// splitPoint returns the index of the first turn to keep: the recent turns
// kept fit keepChars when possible (at least the last round is kept), and
// the kept part never starts with tool results, so a tool call is never
// separated from its result. 0 means there is nothing to compact.
func splitPoint(hist []Turn, keepChars int) int {
	cut, size := 0, 0
	for i := len(hist) - 1; i >= 1; i-- {
		size += hist[i].size()
		if _, results := hist[i].(*ToolResultsTurn); results {
			continue
		}
		if size <= keepChars || cut == 0 {
			cut = i
		}
		if size > keepChars {
			break
		}
	}
	if cut == 1 {
		if _, ok := hist[0].(*SummaryTurn); ok {
			return 0 // only the previous summary would be summarised again
		}
	}
	return cut
}

// summarize asks the model for a summary of old. It returns the summary and
// the model used.
func (s *Session) summarize(ctx context.Context, old []Turn) (string, string, error) {
	client := s.client
	if s.compactClient != nil {
		client = s.compactClient
	}
	model := s.profile.Model()
	if s.cfg.Compaction.Model != "" {
		model = s.cfg.Compaction.Model
	}
	limit := 200_000
	if w := s.contextWindow(); w > 0 {
		limit = min(limit, w*charsPerToken/2)
	}
	req := &llm.Request{
		Model: model,
		Messages: []llm.Message{
			llm.TextMessage(llm.RoleSystem, CompactionPrompt),
			llm.TextMessage(llm.RoleUser, transcript(old, limit)),
		},
		MaxOutputTokens: compactionSummaryTokens,
	}
	resp, err := client.Complete(ctx, req)
	if err != nil {
		return "", model, fmt.Errorf("summarize history: %w", err)
	}
	if resp == nil || strings.TrimSpace(resp.Text()) == "" {
		return "", model, errors.New("summarize history: the model returned no summary")
	}
	return strings.TrimSpace(resp.Text()), model, nil
}

// transcript renders turns as plain text for the summary call, at most
// limit characters (the start, with the task, and the most recent part are
// kept). Provider raw parts are left out: the summary model may be another
// provider, and the summarised turns are never sent again.
func transcript(turns []Turn, limit int) string {
	var b strings.Builder
	b.WriteString("Conversation transcript to summarise:\n\n")
	for _, t := range turns {
		switch t := t.(type) {
		case *UserTurn:
			fmt.Fprintf(&b, "USER: %s\n\n", clip(t.Content, 8000))
		case *SteeringTurn:
			fmt.Fprintf(&b, "USER (steering): %s\n\n", clip(t.Content, 4000))
		case *SystemTurn:
			fmt.Fprintf(&b, "SYSTEM: %s\n\n", clip(t.Content, 4000))
		case *SummaryTurn:
			fmt.Fprintf(&b, "EARLIER SUMMARY: %s\n\n", clip(t.Content, 16000))
		case *AssistantTurn:
			if t.Content != "" {
				fmt.Fprintf(&b, "ASSISTANT: %s\n", clip(t.Content, 4000))
			}
			for _, c := range t.ToolCalls {
				fmt.Fprintf(&b, "ASSISTANT called %s(%s)\n", c.Name, clip(string(c.Arguments), 1000))
			}
			b.WriteString("\n")
		case *ToolResultsTurn:
			for _, r := range t.Results {
				status := "result"
				if r.IsError {
					status = "error"
				}
				fmt.Fprintf(&b, "TOOL %s %s: %s\n", r.Name, status, clip(r.Content, 2000))
			}
			b.WriteString("\n")
		}
	}
	out := b.String()
	if len(out) <= limit {
		return out
	}
	head := limit / 4
	return out[:head] + "\n[... transcript shortened ...]\n" + out[len(out)-(limit-head):]
}

// lastUserRequest is the content of the last user input among turns.
func lastUserRequest(turns []Turn) string {
	for i := len(turns) - 1; i >= 0; i-- {
		if u, ok := turns[i].(*UserTurn); ok {
			return u.Content
		}
	}
	return ""
}

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " [...]"
}

// retryAfterOverflow handles a context-length error from the provider: one
// forced compaction, then the same request again. The error returned when
// that is not possible or does not help says what was tried.
func (s *Session) retryAfterOverflow(ctx context.Context, cause error) (*llm.Response, error) {
	setTried := func(msg string) {
		s.mu.Lock()
		s.overflow = msg
		s.mu.Unlock()
	}
	if s.cfg.Compaction.Disabled {
		setTried("compaction is disabled for this session")
		return nil, cause
	}
	if err := s.emit(ctx, EventWarning, EventData{Message: "Context window exceeded (" + cause.Error() +
		"): compacting history and retrying"}); err != nil {
		return nil, err
	}
	compacted, err := s.maybeCompact(ctx, s.request(), true)
	if err != nil {
		return nil, err
	}
	if !compacted {
		setTried("there was no older history left to compact")
		return nil, cause
	}
	resp, err := s.callModel(ctx, s.request())
	if err != nil && llm.KindOf(err) == llm.KindContextLength {
		setTried("history was compacted once and the request retried, and it still does not fit")
	}
	return resp, err
}
