package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// ProviderName is the provider name of scripted clients.
const ProviderName = "scripted"

// Client replays a Script. It is safe for concurrent use.
type Client struct {
	script *Script
	model  string

	mu       sync.Mutex
	failures map[string]int // failures served per agent/turn, for Error.Times
}

// New returns a client replaying s.
func New(s *Script, model string) *Client {
	return &Client{script: s, model: model, failures: map[string]int{}}
}

// Reply is what a scripted turn does for one request: answer with
// Response, or fail with Err (before anything is sent, or mid-stream after
// the text of Response when MidStream is set).
type Reply struct {
	Response  *llm.Response
	Err       *llm.Error
	Code      string // provider error code for wire servers, may be empty
	MidStream bool
	Stall     bool
}

// Resolve picks the turn answering req and says what it does this time.
// The error is an *llm.Error of kind invalid_request when the script is
// exhausted or the turn's expectation does not hold. Wire-protocol test
// servers use it; Complete and Stream are built on it.
func (c *Client) Resolve(req *llm.Request) (Reply, error) {
	turn, index, err := c.turn(req)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Response: c.response(turn, index), Stall: turn.Stall}
	if turn.Error != nil && c.failNow(req, index, turn.Error) {
		r.Err = &llm.Error{Kind: turn.Error.Kind, Provider: ProviderName, StatusCode: turn.Error.StatusCode,
			Message: turn.Error.Message, Code: turn.Error.Code,
			RetryAfter: time.Duration(turn.Error.RetryAfterMs) * time.Millisecond}
		r.Code = turn.Error.Code
		r.MidStream = turn.Error.MidStream
	}
	return r, nil
}

// failNow reports whether turn index with error e fails this time, counting
// failures when e.Times is set.
func (c *Client) failNow(req *llm.Request, index int, e *Error) bool {
	if e.Times <= 0 {
		return true
	}
	_, agent := c.script.turnsFor(req.Messages)
	key := fmt.Sprintf("%s\x00%d", agent, index)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failures[key] >= e.Times {
		return false
	}
	c.failures[key]++
	return true
}

// Complete returns the scripted turn for req.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := c.Resolve(req)
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Response, nil
}

// Stream yields the scripted turn as deltas, then the finish event. A
// mid-stream error is yielded after the text deltas.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		r, err := c.Resolve(req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		if r.Err != nil && !r.MidStream {
			yield(llm.StreamEvent{}, r.Err)
			return
		}
		for _, ev := range streamEvents(r.Response) {
			if err := ctx.Err(); err != nil {
				yield(llm.StreamEvent{}, err)
				return
			}
			if r.Err != nil && ev.Type != llm.EventTextDelta {
				yield(llm.StreamEvent{}, r.Err)
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

func (c *Client) turn(req *llm.Request) (Turn, int, error) {
	turns, _ := c.script.turnsFor(req.Messages)
	index := 0
	for _, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			index++
		}
	}
	if index >= len(turns) {
		return Turn{}, index, &llm.Error{Kind: llm.KindInvalidRequest, Provider: ProviderName,
			Message: fmt.Sprintf("script exhausted: the conversation asks for turn %d but the script has %d", index+1, len(turns))}
	}
	t := turns[index]
	if t.WebSearch != nil && req.WebSearch == nil {
		return t, index, &llm.Error{Kind: llm.KindInvalidRequest, Provider: ProviderName,
			Message: fmt.Sprintf("turn %d: the script has a web search but the request does not offer the web search tool", index+1)}
	}
	if err := t.Expect.check(req); err != nil {
		return t, index, &llm.Error{Kind: llm.KindInvalidRequest, Provider: ProviderName,
			Message: fmt.Sprintf("turn %d: %v", index+1, err)}
	}
	return t, index, nil
}

func (c *Client) response(t Turn, index int) *llm.Response {
	msg := llm.Message{Role: llm.RoleAssistant}
	if t.Reasoning != "" {
		msg.Content = append(msg.Content, llm.ContentPart{Kind: llm.PartReasoning, Text: t.Reasoning})
	}
	if ws := t.WebSearch; ws != nil {
		msg.Content = append(msg.Content, llm.ContentPart{Kind: llm.PartWebSearch, WebSearch: &llm.WebSearchCall{
			ID: fmt.Sprintf("srvtoolu_%d", index+1), Queries: []string{ws.Query}, Results: ws.Results, Error: ws.Error}})
	}
	if t.Text != "" {
		part := llm.ContentPart{Kind: llm.PartText, Text: t.Text}
		if t.WebSearch != nil {
			part.Citations = t.WebSearch.Citations
		}
		msg.Content = append(msg.Content, part)
	}
	for i, tc := range t.ToolCalls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", index+1, i+1)
		}
		args := tc.Arguments
		if len(args) == 0 {
			args = []byte("{}")
		}
		msg.Content = append(msg.Content, llm.ContentPart{Kind: llm.PartToolCall,
			ToolCall: &llm.ToolCall{ID: id, Name: tc.Name, Arguments: args}})
	}
	finish := llm.FinishStop
	if len(t.ToolCalls) > 0 {
		finish = llm.FinishToolCalls
	}
	if t.PauseTurn {
		finish = llm.FinishOther
	}
	usage := llm.Usage{}
	if t.Usage != nil {
		usage = *t.Usage
	}
	return &llm.Response{ID: fmt.Sprintf("scripted-%d", index+1), Model: c.model, Message: msg,
		FinishReason: finish, Usage: usage}
}

func (e *Expect) check(req *llm.Request) error {
	if e == nil {
		return nil
	}
	if e.LastToolResultContains != "" {
		last := ""
		for _, m := range req.Messages {
			for _, p := range m.Content {
				if p.Kind == llm.PartToolResult && p.ToolResult != nil {
					last = p.ToolResult.Content
				}
			}
		}
		if !strings.Contains(last, e.LastToolResultContains) {
			return fmt.Errorf("expected the last tool result to contain %q, got %q", e.LastToolResultContains, clip(last))
		}
	}
	if e.LastUserContains != "" {
		last := ""
		for _, m := range req.Messages {
			if m.Role == llm.RoleUser && m.Text() != "" {
				last = m.Text()
			}
		}
		if !strings.Contains(last, e.LastUserContains) {
			return fmt.Errorf("expected the last user message to contain %q, got %q", e.LastUserContains, clip(last))
		}
	}
	if e.ReasoningEffort != nil && *e.ReasoningEffort != req.ReasoningEffort {
		return fmt.Errorf("expected reasoning effort %q, got %q", *e.ReasoningEffort, req.ReasoningEffort)
	}
	if e.HistoryWebSearch != "" {
		found := false
		for _, m := range req.Messages {
			for _, ws := range m.WebSearches() {
				found = found || (m.Role == llm.RoleAssistant && slices.Contains(ws.Queries, e.HistoryWebSearch))
			}
		}
		if !found {
			return fmt.Errorf("expected a web search for %q in the history, found none", e.HistoryWebSearch)
		}
	}
	if e.WebSearch != nil {
		if req.WebSearch == nil {
			return fmt.Errorf("expected the web search tool, got none")
		}
		want, _ := json.Marshal(e.WebSearch)
		got, _ := json.Marshal(req.WebSearch)
		if string(want) != string(got) {
			return fmt.Errorf("expected web search options %s, got %s", want, got)
		}
	}
	return nil
}

func clip(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// streamEvents renders resp as the events a streaming provider would send.
func streamEvents(resp *llm.Response) []llm.StreamEvent {
	var evs []llm.StreamEvent
	for _, p := range resp.Message.Content {
		switch p.Kind {
		case llm.PartReasoning:
			evs = append(evs, llm.StreamEvent{Type: llm.EventReasoningDelta, Delta: p.Text})
		case llm.PartWebSearch:
			ws := *p.WebSearch
			evs = append(evs, llm.StreamEvent{Type: llm.EventWebSearch, WebSearch: &ws})
		case llm.PartText:
			for _, chunk := range chunks(p.Text) {
				evs = append(evs, llm.StreamEvent{Type: llm.EventTextDelta, Delta: chunk})
			}
		case llm.PartToolCall:
			tc := *p.ToolCall
			evs = append(evs,
				llm.StreamEvent{Type: llm.EventToolCallStart, ToolCall: &llm.ToolCall{ID: tc.ID, Name: tc.Name}},
				llm.StreamEvent{Type: llm.EventToolCallDelta, ToolCall: &llm.ToolCall{ID: tc.ID, Name: tc.Name}, Delta: string(tc.Arguments)},
				llm.StreamEvent{Type: llm.EventToolCallEnd, ToolCall: &tc})
		}
	}
	return append(evs, llm.StreamEvent{Type: llm.EventFinish, Response: resp})
}

// chunks splits s after spaces into a few pieces, as a model streams tokens.
func chunks(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, ' ')
		if i < 0 || len(s) < 16 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}
