package scripted

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Script is a scripted conversation (YAML or JSON).
//
//	turns:                      # answers for the main conversation
//	  - text: "Creating the file."
//	    toolCalls:
//	      - name: write_file
//	        arguments: {file_path: hello.py, content: "print('Hello World')\n"}
//	  - expect: {lastToolResultContains: "bytes"}
//	    text: "Done."
//	agents:                     # answers for conversations whose first user message matches
//	  - match: "write tests"
//	    turns: [{text: "Tests written."}]
type Script struct {
	Turns  []Turn  `json:"turns"`
	Agents []Agent `json:"agents,omitempty"`
}

// Agent is a script for conversations whose first user message contains Match.
type Agent struct {
	Match string `json:"match"`
	Turns []Turn `json:"turns"`
}

// Turn is one model response, or one error.
type Turn struct {
	Text      string     `json:"text,omitempty"`
	Reasoning string     `json:"reasoning,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// WebSearch is a search the provider ran with its server-side web
	// search tool before answering; the request must offer that tool
	// (llm.Request.WebSearch). The wire-protocol test servers send it in
	// their provider's shape.
	WebSearch *WebSearch `json:"webSearch,omitempty"`
	Usage     *llm.Usage `json:"usage,omitempty"`
	// Error makes this turn fail instead of answering.
	Error *Error `json:"error,omitempty"`
	// Expect, if set, is checked against the request; a mismatch fails the
	// call with an invalid-request error naming what was expected.
	Expect *Expect `json:"expect,omitempty"`
	// Stall makes the wire-protocol test servers (internal/llm/llmtest)
	// stop a streamed answer after its first text delta and send nothing
	// more until the client goes away, for cancellation and idle-watchdog
	// tests. The in-memory client ignores it.
	Stall bool `json:"stall,omitempty"`
	// PauseTurn ends the answer with finish reason other, which the
	// Anthropic wire server sends as stop_reason pause_turn (a long
	// server-tool turn the API paused; the client sends the answer back
	// to continue it, and the next turn answers that).
	PauseTurn bool `json:"pauseTurn,omitempty"`
}

// WebSearch is a scripted provider-hosted web search: its query, the pages
// it found, and the citations on the turn's text (or an error code instead
// of results, e.g. max_uses_exceeded).
type WebSearch struct {
	Query     string                `json:"query"`
	Results   []llm.WebSearchResult `json:"results,omitempty"`
	Citations []llm.Citation        `json:"citations,omitempty"`
	Error     string                `json:"error,omitempty"`
}

// ToolCall is a scripted tool call. ID defaults to call_<turn>_<index>.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Error is a scripted failure.
type Error struct {
	Kind         llm.ErrorKind `json:"kind"`
	StatusCode   int           `json:"statusCode,omitempty"`
	Message      string        `json:"message,omitempty"`
	RetryAfterMs int           `json:"retryAfterMs,omitempty"`
	// Code is the provider error type or code the wire-protocol test
	// servers put in the error body (e.g. "overloaded_error"); by default
	// one matching Kind.
	Code string `json:"code,omitempty"`
	// Times, when positive, makes the turn fail only for its first Times
	// requests and answer with its text and tool calls afterwards (so
	// retries can be tested). The count is kept per client (per server).
	Times int `json:"times,omitempty"`
	// MidStream makes a streamed request fail after the turn's text has
	// been streamed, as an in-stream error event; a non-streamed request
	// fails as usual.
	MidStream bool `json:"midStream,omitempty"`
}

// Expect describes what the request answered by a turn must contain.
type Expect struct {
	// LastToolResultContains must be a substring of the last tool result.
	LastToolResultContains string `json:"lastToolResultContains,omitempty"`
	// LastUserContains must be a substring of the last user-role text.
	LastUserContains string `json:"lastUserContains,omitempty"`
	// ReasoningEffort must equal the request's reasoning effort.
	ReasoningEffort *string `json:"reasoningEffort,omitempty"`
	// WebSearch must equal the request's web search options (as far as
	// the provider's wire shape carries them).
	WebSearch *llm.WebSearch `json:"webSearch,omitempty"`
	// HistoryWebSearch must be the query of a web search in the assistant
	// messages of the history (one sent back, as Anthropic and OpenAI
	// Responses require).
	HistoryWebSearch string `json:"historyWebSearch,omitempty"`
}

// Parse reads a Script from YAML or JSON and validates it.
func Parse(data []byte) (*Script, error) {
	var s Script
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("parse script: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks that every turn answers or fails, and tool calls are named.
func (s *Script) Validate() error {
	var errs []error
	check := func(where string, turns []Turn) {
		for i, t := range turns {
			if t.Error != nil && t.Error.Times <= 0 && !t.Error.MidStream && (t.Text != "" || len(t.ToolCalls) > 0) {
				errs = append(errs, fmt.Errorf("%s turn %d: a turn is either an error or an answer (unless error.times or error.midStream is set)", where, i+1))
			}
			if ws := t.WebSearch; ws != nil {
				if ws.Query == "" {
					errs = append(errs, fmt.Errorf("%s turn %d: webSearch.query is required", where, i+1))
				}
				if len(ws.Citations) > 0 && t.Text == "" {
					errs = append(errs, fmt.Errorf("%s turn %d: webSearch.citations need the turn's text", where, i+1))
				}
			}
			for j, tc := range t.ToolCalls {
				if tc.Name == "" {
					errs = append(errs, fmt.Errorf("%s turn %d tool call %d: name is required", where, i+1, j+1))
				}
				if len(tc.Arguments) > 0 && !json.Valid(tc.Arguments) {
					errs = append(errs, fmt.Errorf("%s turn %d tool call %d: arguments are not valid JSON", where, i+1, j+1))
				}
			}
		}
	}
	check("main", s.Turns)
	for i, a := range s.Agents {
		if a.Match == "" {
			errs = append(errs, fmt.Errorf("agent %d: match is required", i+1))
		}
		check(fmt.Sprintf("agent %q", a.Match), a.Turns)
	}
	return errors.Join(errs...)
}

// turnsFor picks the turns for the conversation in msgs, and the key of the
// agent they belong to ("" for the main turns).
func (s *Script) turnsFor(msgs []llm.Message) ([]Turn, string) {
	first := ""
	for _, m := range msgs {
		if m.Role == llm.RoleUser {
			first = m.Text()
			break
		}
	}
	for _, a := range s.Agents {
		if strings.Contains(first, a.Match) {
			return a.Turns, a.Match
		}
	}
	return s.Turns, ""
}
