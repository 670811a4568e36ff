package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

// Target is what a Suite factory needs to build an adapter client.
type Target struct {
	BaseURL           string
	APIKey            string
	Model             string
	StreamIdleTimeout time.Duration
}

// Suite runs the same behavioural checks against any adapter through its
// real SDK and this package's fake server for Protocol.
type Suite struct {
	Protocol Protocol
	// New builds the adapter under test.
	New func(t *testing.T, target Target) llm.Client
	// SecretEnv are environment variables the SDK would read (keys, base
	// URLs); the suite sets them to secret values and checks that none of
	// them reaches the server and that the configured base URL is used.
	SecretEnv []string
	// CheckRequest, if set, is called with the recorded requests of the
	// multi-tool conversation (first request: first turn, second: after
	// the tool results) for protocol-specific assertions.
	CheckRequest func(t *testing.T, reqs []Request)
	// CheckCaching, if set, is called with the three recorded requests of
	// the prompt-caching conversation (sent with Request.CacheKey set to
	// CacheKey) for protocol-specific assertions: breakpoints, cache keys.
	CheckCaching func(t *testing.T, reqs []Request)
	// WebSearch are the web search options the provider supports; nil for
	// a protocol without server-side search, whose adapter must then fail
	// a request asking for it.
	WebSearch *llm.WebSearch
	// CheckWebSearch, if set, is called with the two recorded requests of
	// the web search conversation: the search tool and its options on
	// the first, the search sent back on the second.
	CheckWebSearch func(t *testing.T, reqs []Request)
}

// CacheKey is the Request.CacheKey of the suite's prompt-caching
// conversation.
const CacheKey = "llmtest-session-1"

// ParseScript parses a script or fails t.
func ParseScript(t testing.TB, yaml string) *scripted.Script {
	t.Helper()
	s, err := scripted.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("parse script: %v", err)
	}
	return s
}

// Weather is the tool definition the suite offers.
var Weather = llm.ToolDefinition{Name: "weather", Description: "Get the weather for a location",
	Parameters: json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}`)}

// Add is a second tool for multi-tool turns.
var Add = llm.ToolDefinition{Name: "add", Description: "Add two numbers",
	Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)}

const multiToolScript = `
turns:
  - reasoning: "Two tools are needed."
    text: "Checking."
    toolCalls:
      - {id: call_w, name: weather, arguments: {location: Florence}}
      - {id: call_a, name: add, arguments: {a: 2, b: 3}}
    usage: {inputTokens: 120, outputTokens: 30, reasoningTokens: 12, cacheReadTokens: 100}
  - expect: {lastToolResultContains: "5"}
    text: "It is 40 C in Florence and 2+3=5."
    usage: {inputTokens: 200, outputTokens: 20}
`

// Collect drains a stream: the final response, text and reasoning deltas,
// ended tool calls, and the error if the stream failed.
func Collect(stream func(yield func(llm.StreamEvent, error) bool)) (resp *llm.Response, text, reasoning string, calls []llm.ToolCall, err error) {
	var tb, rb strings.Builder
	for ev, e := range stream {
		if e != nil {
			return resp, tb.String(), rb.String(), calls, e
		}
		switch ev.Type {
		case llm.EventTextDelta:
			tb.WriteString(ev.Delta)
		case llm.EventReasoningDelta:
			rb.WriteString(ev.Delta)
		case llm.EventToolCallEnd:
			calls = append(calls, *ev.ToolCall)
		case llm.EventFinish:
			resp = ev.Response
		}
	}
	return resp, tb.String(), rb.String(), calls, nil
}

func (s Suite) start(t *testing.T, yaml string) (*Server, llm.Client) {
	srv := StartScript(t, s.Protocol, ParseScript(t, yaml))
	return srv, s.New(t, Target{BaseURL: srv.BaseURL(), APIKey: "test-key", Model: "test-model"})
}

// call runs one request through Complete or Stream.
func call(ctx context.Context, c llm.Client, stream bool, req *llm.Request) (*llm.Response, error) {
	if !stream {
		return c.Complete(ctx, req)
	}
	resp, _, _, _, err := Collect(c.Stream(ctx, req))
	if err == nil && resp == nil {
		err = errors.New("stream ended without a finish event")
	}
	return resp, err
}

func modes(t *testing.T, f func(t *testing.T, stream bool)) {
	t.Run("complete", func(t *testing.T) { f(t, false) })
	t.Run("stream", func(t *testing.T) { f(t, true) })
}

func userReq(text string) *llm.Request {
	return &llm.Request{Model: "test-model", Messages: []llm.Message{
		llm.TextMessage(llm.RoleSystem, "You are a helpful assistant."),
		llm.TextMessage(llm.RoleUser, text)}, Tools: []llm.ToolDefinition{Weather, Add}}
}

func wantKind(t *testing.T, err error, kind llm.ErrorKind) *llm.Error {
	t.Helper()
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != kind {
		t.Fatalf("error = %v (kind %q), want kind %q", err, llm.KindOf(err), kind)
	}
	return e
}

// Run runs the suite.
func (s Suite) Run(t *testing.T) {
	t.Run("multi-tool round trip", func(t *testing.T) { modes(t, s.multiTool) })
	t.Run("tool error result", func(t *testing.T) { modes(t, s.toolError) })
	t.Run("prompt caching across turns", func(t *testing.T) { modes(t, s.caching) })
	t.Run("reasoning effort", func(t *testing.T) { modes(t, s.effort) })
	t.Run("retry rate limit honours Retry-After", func(t *testing.T) { modes(t, s.retryRateLimit) })
	t.Run("retry server error", func(t *testing.T) { modes(t, s.retryServer) })
	t.Run("retry dropped connection", func(t *testing.T) { modes(t, s.retryNetwork) })
	t.Run("no retry on authentication error", func(t *testing.T) { modes(t, s.noRetryAuth) })
	t.Run("context length", func(t *testing.T) { modes(t, s.contextLength) })
	t.Run("a stream cut after output is retried after a restart", s.midStream)
	t.Run("cancel mid-stream", s.cancel)
	t.Run("idle stream watchdog", s.idle)
	t.Run("no environment credentials", func(t *testing.T) { modes(t, s.noEnv) })
	t.Run("provider web search", func(t *testing.T) { modes(t, s.webSearch) })
}

func (s Suite) multiTool(t *testing.T, stream bool) {
	srv, c := s.start(t, multiToolScript)
	req := userReq("What is the weather in Florence, and 2+3?")
	req.ReasoningEffort = "high"
	var resp *llm.Response
	var err error
	var text, reasoning string
	var ended []llm.ToolCall
	if stream {
		resp, text, reasoning, ended, err = Collect(c.Stream(t.Context(), req))
	} else {
		resp, err = c.Complete(t.Context(), req)
	}
	if err != nil {
		t.Fatal(err)
	}
	if resp == nil {
		t.Fatal("no response")
	}
	calls := resp.ToolCalls()
	if len(calls) != 2 || calls[0].Name != "weather" || calls[1].Name != "add" {
		t.Fatalf("tool calls = %+v, want weather and add", calls)
	}
	var args map[string]any
	if err := json.Unmarshal(calls[0].Arguments, &args); err != nil || args["location"] != "Florence" {
		t.Fatalf("weather arguments %s: %v", calls[0].Arguments, err)
	}
	if calls[0].ID == "" || calls[1].ID == "" || calls[0].ID == calls[1].ID {
		t.Fatalf("tool call ids %q, %q must be set and distinct", calls[0].ID, calls[1].ID)
	}
	if resp.FinishReason != llm.FinishToolCalls {
		t.Fatalf("finish reason = %q, want tool_calls", resp.FinishReason)
	}
	if !strings.Contains(resp.Reasoning(), "Two tools") || resp.Text() != "Checking." {
		t.Fatalf("reasoning %q text %q", resp.Reasoning(), resp.Text())
	}
	wantUsage := llm.Usage{InputTokens: 120, OutputTokens: 30, ReasoningTokens: 12, CacheReadTokens: 100}
	if s.Protocol == Anthropic {
		wantUsage.ReasoningTokens = 0 // Anthropic does not report reasoning tokens separately
	}
	if resp.Usage != wantUsage {
		t.Fatalf("usage = %+v, want %+v", resp.Usage, wantUsage)
	}
	if stream {
		if text != resp.Text() || len(ended) != 2 {
			t.Fatalf("streamed text %q (final %q), %d ended tool calls", text, resp.Text(), len(ended))
		}
		if string(ended[1].Arguments) != string(calls[1].Arguments) {
			t.Fatalf("streamed arguments %s, final %s", ended[1].Arguments, calls[1].Arguments)
		}
		if !strings.Contains(reasoning, "Two tools") {
			t.Fatalf("streamed reasoning %q", reasoning)
		}
	}
	req.Messages = append(req.Messages, resp.Message,
		llm.Message{Role: llm.RoleTool, Content: []llm.ContentPart{
			{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[0].ID, Name: "weather", Content: "40 C"}},
			{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[1].ID, Name: "add", Content: "5"}}}},
		llm.TextMessage(llm.RoleUser, "Answer briefly."))
	final, err := call(t.Context(), c, stream, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(final.Text(), "2+3=5") || final.FinishReason != llm.FinishStop {
		t.Fatalf("final text %q finish %q", final.Text(), final.FinishReason)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if strings.Contains(string(r.RawBody), "test-key") {
			t.Fatal("the API key appears in a request body")
		}
	}
	if s.CheckRequest != nil {
		s.CheckRequest(t, reqs)
	}
}

// cachingScript is a three-request conversation whose usage reports cache
// writes and growing cache reads, as a provider does when each request
// extends the cached prefix of the one before.
const cachingScript = `
turns:
  - reasoning: "Both tools first."
    toolCalls:
      - {id: call_w, name: weather, arguments: {location: Florence}}
      - {id: call_a, name: add, arguments: {a: 2, b: 3}}
    usage: {inputTokens: 1500, outputTokens: 40, cacheWriteTokens: 1400}
  - expect: {lastToolResultContains: "5"}
    reasoning: "Now Rome."
    toolCalls:
      - {id: call_r, name: weather, arguments: {location: Rome}}
    usage: {inputTokens: 1700, outputTokens: 30, cacheReadTokens: 1400, cacheWriteTokens: 250}
  - expect: {lastToolResultContains: "Rome"}
    text: "Florence 40 C, Rome 35 C, 2+3=5."
    usage: {inputTokens: 1900, outputTokens: 12, cacheReadTokens: 1650, cacheWriteTokens: 200}
`

// caching runs cachingScript with Request.CacheKey set, checks that the
// cache token counts of every response reach llm.Usage, and hands the
// requests to CheckCaching.
func (s Suite) caching(t *testing.T, stream bool) {
	srv, c := s.start(t, cachingScript)
	req := userReq("Weather in Florence and Rome, and 2+3?")
	req.ReasoningEffort = "high"
	req.CacheKey = CacheKey
	want := []llm.Usage{
		{InputTokens: 1500, OutputTokens: 40, CacheWriteTokens: 1400},
		{InputTokens: 1700, OutputTokens: 30, CacheReadTokens: 1400, CacheWriteTokens: 250},
		{InputTokens: 1900, OutputTokens: 12, CacheReadTokens: 1650, CacheWriteTokens: 200},
	}
	results := [][]string{{"40 C", "5"}, {"35 C in Rome"}}
	for i, w := range want {
		resp, err := call(t.Context(), c, stream, req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if s.Protocol != Anthropic {
			// Only Anthropic reports cache writes; the others bill them
			// as plain input, which InputTokens already includes.
			w.CacheWriteTokens = 0
		}
		if resp.Usage != w {
			t.Fatalf("request %d: usage = %+v, want %+v", i+1, resp.Usage, w)
		}
		if i == len(results) {
			if !strings.Contains(resp.Text(), "Rome 35 C") {
				t.Fatalf("final text %q", resp.Text())
			}
			break
		}
		calls := resp.ToolCalls()
		if len(calls) != len(results[i]) {
			t.Fatalf("request %d: tool calls %+v, want %d", i+1, calls, len(results[i]))
		}
		tool := llm.Message{Role: llm.RoleTool}
		for j, tc := range calls {
			tool.Content = append(tool.Content, llm.ContentPart{Kind: llm.PartToolResult,
				ToolResult: &llm.ToolResult{CallID: tc.ID, Name: tc.Name, Content: results[i][j]}})
		}
		req.Messages = append(req.Messages, resp.Message, tool)
	}
	reqs := srv.Requests()
	if len(reqs) != len(want) {
		t.Fatalf("server saw %d requests, want %d", len(reqs), len(want))
	}
	if s.CheckCaching != nil {
		s.CheckCaching(t, reqs)
	}
}

func (s Suite) toolError(t *testing.T, stream bool) {
	_, c := s.start(t, `
turns:
  - toolCalls: [{id: call_1, name: weather, arguments: {location: Atlantis}}]
  - expect: {lastToolResultContains: "unknown location"}
    text: "I could not find Atlantis."
`)
	req := userReq("Weather in Atlantis?")
	resp, err := call(t.Context(), c, stream, req)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.ToolCalls()
	if len(calls) != 1 {
		t.Fatalf("calls = %+v", calls)
	}
	req.Messages = append(req.Messages, resp.Message, llm.Message{Role: llm.RoleTool, Content: []llm.ContentPart{
		{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[0].ID, Name: "weather", Content: "error: unknown location", IsError: true}}}})
	final, err := call(t.Context(), c, stream, req)
	if err != nil {
		t.Fatal(err)
	}
	if final.Text() != "I could not find Atlantis." {
		t.Fatalf("final text %q", final.Text())
	}
}

func (s Suite) effort(t *testing.T, stream bool) {
	for _, effort := range []string{"low", "medium", "high"} {
		t.Run(effort, func(t *testing.T) {
			_, c := s.start(t, `turns: [{expect: {reasoningEffort: `+effort+`}, text: ok}]`)
			req := userReq("hi")
			req.ReasoningEffort = effort
			if _, err := call(t.Context(), c, stream, req); err != nil {
				t.Fatalf("effort %s did not reach the server as %s: %v", effort, effort, err)
			}
		})
	}
}

// retryClient wraps c with a policy whose own backoff is 1ms and records
// every wait, so a test can tell the server's Retry-After was used.
func retryClient(c llm.Client, waits *[]time.Duration, mu *sync.Mutex) llm.Client {
	return llm.WithRetry(c, llm.RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		MaxRetryAfter: time.Minute,
		OnRetry: func(_ int, _ error, d time.Duration) {
			mu.Lock()
			*waits = append(*waits, d)
			mu.Unlock()
		}})
}

func (s Suite) retryRateLimit(t *testing.T, stream bool) {
	srv, c := s.start(t, `turns: [{error: {kind: rate_limit, retryAfterMs: 30, times: 2}, text: "finally"}]`)
	var waits []time.Duration
	var mu sync.Mutex
	resp, err := call(t.Context(), retryClient(c, &waits, &mu), stream, userReq("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "finally" || len(srv.Requests()) != 3 {
		t.Fatalf("text %q after %d requests, want 3", resp.Text(), len(srv.Requests()))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, w := range waits {
		if w != 30*time.Millisecond {
			t.Fatalf("waits = %v, want the server's 30ms each", waits)
		}
	}
}

func (s Suite) retryServer(t *testing.T, stream bool) {
	srv, c := s.start(t, `turns: [{error: {kind: server, statusCode: 503, times: 1}, text: "recovered"}]`)
	var waits []time.Duration
	var mu sync.Mutex
	resp, err := call(t.Context(), retryClient(c, &waits, &mu), stream, userReq("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "recovered" || len(srv.Requests()) != 2 {
		t.Fatalf("text %q after %d requests, want 2", resp.Text(), len(srv.Requests()))
	}
	// Without retries the 503 is a server error.
	srv2, c2 := s.start(t, `turns: [{error: {kind: server, statusCode: 503}}]`)
	_, err = call(t.Context(), c2, stream, userReq("hi"))
	if e := wantKind(t, err, llm.KindServer); e.StatusCode != 503 || len(srv2.Requests()) != 1 {
		t.Fatalf("status %d after %d requests: the SDK's own retries must be off", e.StatusCode, len(srv2.Requests()))
	}
}

func (s Suite) retryNetwork(t *testing.T, stream bool) {
	srv, c := s.start(t, `turns: [{error: {kind: network, times: 1}, text: "reconnected"}]`)
	var waits []time.Duration
	var mu sync.Mutex
	resp, err := call(t.Context(), retryClient(c, &waits, &mu), stream, userReq("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "reconnected" || len(srv.Requests()) != 2 {
		t.Fatalf("text %q after %d requests, want 2", resp.Text(), len(srv.Requests()))
	}
}

func (s Suite) noRetryAuth(t *testing.T, stream bool) {
	srv, c := s.start(t, `turns: [{error: {kind: authentication}}]`)
	var waits []time.Duration
	var mu sync.Mutex
	_, err := call(t.Context(), retryClient(c, &waits, &mu), stream, userReq("hi"))
	e := wantKind(t, err, llm.KindAuthentication)
	if e.StatusCode != 401 || len(srv.Requests()) != 1 || e.Retryable() {
		t.Fatalf("status %d after %d requests, want one 401", e.StatusCode, len(srv.Requests()))
	}
	if strings.Contains(err.Error(), "test-key") {
		t.Fatal("the error message contains the API key")
	}
}

func (s Suite) contextLength(t *testing.T, stream bool) {
	srv, c := s.start(t, `turns: [{error: {kind: context_length}}]`)
	var waits []time.Duration
	var mu sync.Mutex
	_, err := call(t.Context(), retryClient(c, &waits, &mu), stream, userReq("hi"))
	wantKind(t, err, llm.KindContextLength)
	if len(srv.Requests()) != 1 {
		t.Fatalf("%d requests, want 1", len(srv.Requests()))
	}
}

func (s Suite) midStream(t *testing.T) {
	srv, c := s.start(t, `turns: [{text: "partial answer here", error: {kind: server, midStream: true, times: 1}}]`)
	var waits []time.Duration
	var mu sync.Mutex
	restarts, deltasAfter := 0, ""
	var resp *llm.Response
	for ev, err := range retryClient(c, &waits, &mu).Stream(t.Context(), userReq("hi")) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch ev.Type {
		case llm.EventRestart:
			restarts++
			deltasAfter = ""
		case llm.EventTextDelta:
			deltasAfter += ev.Delta
		case llm.EventFinish:
			resp = ev.Response
		}
	}
	if restarts != 1 || len(srv.Requests()) != 2 || resp == nil || resp.Text() != "partial answer here" ||
		deltasAfter != "partial answer here" {
		t.Fatalf("%d restarts, %d requests, answer %v, deltas after the restart %q; want 1, 2 and the answer once",
			restarts, len(srv.Requests()), resp, deltasAfter)
	}
}

func (s Suite) cancel(t *testing.T) {
	_, c := s.start(t, `turns: [{text: "this answer never ends", stall: true}]`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var got error
		for ev, err := range c.Stream(ctx, userReq("hi")) {
			if err != nil {
				got = err
				break
			}
			if ev.Type == llm.EventTextDelta {
				cancel()
			}
		}
		done <- got
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream did not return after cancellation")
	}
}

func (s Suite) idle(t *testing.T) {
	srv := StartScript(t, s.Protocol, ParseScript(t, `turns: [{text: "this answer never ends", stall: true}]`))
	c := s.New(t, Target{BaseURL: srv.BaseURL(), APIKey: "test-key", Model: "test-model", StreamIdleTimeout: 500 * time.Millisecond})
	_, text, _, _, err := Collect(c.Stream(t.Context(), userReq("hi")))
	e := wantKind(t, err, llm.KindNetwork)
	if text == "" || !strings.Contains(e.Message, "idle") {
		t.Fatalf("text %q, error %v: want the first delta, then an idle error", text, err)
	}
}

func (s Suite) noEnv(t *testing.T, stream bool) {
	const secret = "env-secret-must-not-leak"
	for _, k := range s.SecretEnv {
		v := secret
		if strings.HasSuffix(k, "_URL") {
			v = "http://127.0.0.1:9/" + secret
		}
		t.Setenv(k, v)
	}
	srv := StartScript(t, s.Protocol, ParseScript(t, `turns: [{text: ok}]`))
	for _, key := range []string{"", "configured-key"} {
		c := s.New(t, Target{BaseURL: srv.BaseURL(), APIKey: key, Model: "test-model"})
		if _, err := call(t.Context(), c, stream, userReq("hi")); err != nil {
			t.Fatalf("key %q: %v (the configured base URL must be used)", key, err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests reached the configured server, want 2", len(reqs))
	}
	for i, r := range reqs {
		for name, vals := range r.Header {
			for _, v := range vals {
				if strings.Contains(v, secret) {
					t.Fatalf("request %d header %s carries an environment secret", i, name)
				}
				if i == 0 && strings.Contains(v, "configured-key") {
					t.Fatalf("request %d header %s carries a key although none was configured", i, name)
				}
			}
		}
		if strings.Contains(string(r.RawBody), secret) || strings.Contains(r.RawQuery, secret) {
			t.Fatalf("request %d carries an environment secret", i)
		}
	}
	found := false
	for _, vals := range reqs[1].Header {
		for _, v := range vals {
			found = found || strings.Contains(v, "configured-key")
		}
	}
	if !found {
		t.Fatal("the configured key was not sent")
	}
}
