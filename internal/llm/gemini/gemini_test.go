package gemini

import (
	"bytes"
	"encoding/json"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// newClient builds the adapter under test for a fake server.
var newClient = llmtest.Constructor(New, targetConfig)

// targetConfig is the adapter configuration for a test target.
func targetConfig(tg llmtest.Target) Config {
	return Config{APIKey: tg.APIKey, BaseURL: tg.BaseURL, Model: tg.Model, StreamIdleTimeout: tg.StreamIdleTimeout}
}

func TestSuite(t *testing.T) {
	llmtest.Suite{
		Protocol:       llmtest.Gemini,
		New:            newClient,
		SecretEnv:      []string{"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"},
		CheckRequest:   checkRequests,
		CheckCaching:   checkCaching,
		WebSearch:      &llm.WebSearch{},
		CheckWebSearch: checkWebSearch,
	}.Run(t)
}

// checkWebSearch asserts the googleSearch tool next to the function
// declarations on the first request, and that the second sends the answer
// text back without the grounding (Gemini takes none).
func checkWebSearch(t *testing.T, reqs []llmtest.Request) {
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	tools, _ := reqs[0].Body["tools"].([]any)
	if len(tools) != 2 || llmtest.Path(tools, 0, "functionDeclarations") == nil || llmtest.Path(tools, 1, "googleSearch") == nil {
		t.Errorf("tools = %v, want functionDeclarations and googleSearch", tools)
	}
	model := llmtest.Path(reqs[1].Body, "contents", 1)
	if llmtest.Path(model, "role") != "model" || !strings.HasPrefix(llmtest.Path(model, "parts", 0, "text").(string), "Go 1.26") {
		t.Errorf("contents[1] = %v, want the model's answer", model)
	}
	if strings.Contains(string(reqs[1].RawBody), "groundingMetadata") || strings.Contains(string(reqs[1].RawBody), "go.dev/doc") {
		t.Error("the grounding metadata was sent back")
	}
}

func TestWebSearchOptionsRejected(t *testing.T) {
	c, err := New(Config{Model: "gemini-3-pro"})
	if err != nil {
		t.Fatal(err)
	}
	for name, ws := range map[string]*llm.WebSearch{
		"max uses":        {MaxUses: 3},
		"allowed domains": {AllowedDomains: []string{"go.dev"}},
		"blocked domains": {BlockedDomains: []string{"example.com"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Complete(t.Context(), &llm.Request{WebSearch: ws, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
			if llm.KindOf(err) != llm.KindInvalidRequest || !strings.Contains(err.Error(), "web search") {
				t.Fatalf("error = %v, want an invalid-request error about web search", err)
			}
		})
	}
}

// checkCaching asserts that the requests rely on Gemini's implicit caching:
// no cachedContent reference, and Request.CacheKey is not sent anywhere
// (the suite checks that cachedContentTokenCount becomes CacheReadTokens).
func checkCaching(t *testing.T, reqs []llmtest.Request) {
	for i, r := range reqs {
		if _, ok := r.Body["cachedContent"]; ok || strings.Contains(string(r.RawBody), llmtest.CacheKey) {
			t.Errorf("request %d: sends cachedContent or the cache key: %s", i+1, r.RawBody)
		}
	}
}

func checkRequests(t *testing.T, reqs []llmtest.Request) {
	first, second := reqs[0], reqs[1]
	if got := first.Header.Get("X-Goog-Api-Key"); got != "test-key" {
		t.Fatalf("X-Goog-Api-Key = %q", got)
	}
	if !strings.Contains(first.Path, "/v1beta/models/test-model:") {
		t.Fatalf("path = %s", first.Path)
	}
	// test-model is not gemini-2.x: a level, not a budget.
	tc := llmtest.Path(first.Body, "generationConfig", "thinkingConfig")
	if llmtest.Path(tc, "thinkingLevel") != "HIGH" || llmtest.Path(tc, "thinkingBudget") != nil || llmtest.Path(tc, "includeThoughts") != true {
		t.Fatalf("thinkingConfig = %v", tc)
	}
	if llmtest.Path(first.Body, "systemInstruction", "parts", 0, "text") != "You are a helpful assistant." {
		t.Fatalf("systemInstruction = %v", first.Body["systemInstruction"])
	}
	contents := second.Body["contents"].([]any)
	if len(contents) != 3 {
		t.Fatalf("contents = %v", contents)
	}
	model := llmtest.Path(contents, 1, "parts").([]any)
	// thought, text, two function calls, verbatim; the first call keeps its signature.
	if len(model) != 4 || llmtest.Path(model, 0, "thought") != true || llmtest.Path(model, 2, "thoughtSignature") == nil {
		b, _ := json.Marshal(model)
		t.Fatalf("model parts = %s", b)
	}
	user := llmtest.Path(contents, 2, "parts").([]any)
	if len(user) != 3 || llmtest.Path(user, 0, "functionResponse", "id") != "call_w" || llmtest.Path(user, 0, "functionResponse", "response", "output") != "40 C" ||
		llmtest.Path(user, 1, "functionResponse", "name") != "add" || llmtest.Path(user, 2, "text") != "Answer briefly." {
		b, _ := json.Marshal(user)
		t.Fatalf("user parts = %s", b)
	}
}

func TestMissingCallIDsAreGeneratedAndMatchedByPosition(t *testing.T) {
	h := llmtest.NewHandler(llmtest.Gemini, llmtest.ParseScript(t, `
turns:
  - toolCalls: [{name: weather, arguments: {location: A}}, {name: weather, arguments: {location: B}}]
  - expect: {lastToolResultContains: "sunny B"}
    text: done
`))
	h.OmitCallIDs = true
	srv := llmtest.Start(t, h)
	c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), APIKey: "k", Model: "gemini-2.5-flash"})
	req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "weather in A and B")}, ReasoningEffort: "low", Tools: []llm.ToolDefinition{llmtest.Weather}}
	resp, err := c.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.ToolCalls()
	if len(calls) != 2 || calls[0].ID == "" || calls[0].ID == calls[1].ID {
		t.Fatalf("calls = %+v", calls)
	}
	// Answer out of order: the adapter must put them back in call order.
	req.Messages = append(req.Messages, resp.Message, llm.Message{Role: llm.RoleTool, Content: []llm.ContentPart{
		{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[1].ID, Content: "sunny B"}},
		{Kind: llm.PartToolResult, ToolResult: &llm.ToolResult{CallID: calls[0].ID, Content: "rain A"}}}})
	final, err := c.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if final.Text() != "done" {
		t.Fatalf("text %q", final.Text())
	}
	second := srv.Requests()[1].Body
	if got := llmtest.Path(second, "generationConfig", "thinkingConfig", "thinkingBudget"); got != float64(1024) {
		t.Fatalf("gemini-2.5 thinkingBudget = %v", got)
	}
	parts := llmtest.Path(second, "contents", 2, "parts").([]any)
	if llmtest.Path(parts, 0, "functionResponse", "response", "output") != "rain A" || llmtest.Path(parts, 1, "functionResponse", "response", "output") != "sunny B" ||
		llmtest.Path(parts, 0, "functionResponse", "id") != nil {
		b, _ := json.Marshal(parts)
		t.Fatalf("function responses = %s", b)
	}
}

func TestForeignToolCallsGetThePlaceholderSignature(t *testing.T) {
	contents, _, err := convertMessages([]llm.Message{
		llm.TextMessage(llm.RoleUser, "go"),
		{Role: llm.RoleAssistant, Content: []llm.ContentPart{{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: "toolu_1", Name: "x", Arguments: json.RawMessage(`{"a":1}`)}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(contents) != 3 || string(contents[1].Parts[0].ThoughtSignature) != string(skipSignature) ||
		contents[2].Parts[0].FunctionResponse.Response["error"] == nil {
		t.Fatalf("contents = %+v", contents)
	}
}

func TestRecordings(t *testing.T) {
	llmtest.Recording{Protocol: llmtest.Gemini, New: newClient, Dirs: []string{"TestGoogleCommon/*", "TestGoogleThinking/*"}}.Run(t)
}

// TestStreamFailuresDoNotReachTheGlobalLogger: genai prints body read
// errors with the global log package; the adapter hides them from genai.
func TestStreamFailuresDoNotReachTheGlobalLogger(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	srv := llmtest.StartScript(t, llmtest.Gemini, llmtest.ParseScript(t, `turns: [{text: "this answer never ends", stall: true}]`))
	c := newClient(t, llmtest.Target{BaseURL: srv.BaseURL(), APIKey: "k", Model: "gemini-3-pro", StreamIdleTimeout: 300 * time.Millisecond})
	_, _, _, _, err := llmtest.Collect(c.Stream(t.Context(), &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}))
	if llm.KindOf(err) != llm.KindNetwork {
		t.Fatalf("err = %v, want the idle network error", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("genai logged: %q", buf.String())
	}
}
