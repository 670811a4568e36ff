package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	"github.com/agent-operator/agent-operator/internal/llm/provider"
)

// TestServesEveryProtocolThroughTheRealAdapters starts the mux for a
// directory of scripts and talks to each protocol through provider.New.
func TestServesEveryProtocolThroughTheRealAdapters(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.yaml"), []byte(`turns: [{text: "hello from the script"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	mux, routes, err := buildMux(dir, "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 4 {
		t.Fatalf("routes = %v", routes)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	names := map[llmtest.Protocol]string{llmtest.Anthropic: provider.Anthropic, llmtest.OpenAIResponses: provider.OpenAI,
		llmtest.ChatCompletions: provider.OpenAICompatible, llmtest.Gemini: provider.Gemini}
	for _, p := range llmtest.Protocols {
		t.Run(string(p), func(t *testing.T) {
			c, err := provider.New(provider.Config{Provider: names[p], Model: "m", BaseURL: llmtest.BaseURL(p, srv.URL+"/hello/"+string(p))})
			if err != nil {
				t.Fatal(err)
			}
			for _, stream := range []bool{false, true} {
				req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
				var resp *llm.Response
				if stream {
					resp, _, _, _, err = llmtest.Collect(c.Stream(t.Context(), req))
				} else {
					resp, err = c.Complete(t.Context(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				if resp.Text() != "hello from the script" {
					t.Fatalf("text %q", resp.Text())
				}
			}
		})
	}
}

// TestRequestsListsEveryModelRequestWithItsStatus checks that GET /requests
// shows each attempt of a retried call, with the status it got and the
// credential header the adapter sent.
func TestRequestsListsEveryModelRequestWithItsStatus(t *testing.T) {
	dir := t.TempDir()
	script := `turns:
  - text: "answered after a 429"
    error: {kind: rate_limit, times: 1, retryAfterMs: 1}
  - text: "answered after a 500"
    error: {kind: server, statusCode: 500, times: 1}
`
	if err := os.WriteFile(filepath.Join(dir, "flaky.yaml"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "down.yaml"), []byte(`turns: [{error: {kind: network}}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	mux, _, err := buildMux(dir, "all")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	retry := llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	flaky, err := provider.New(provider.Config{Provider: provider.Anthropic, Model: "m", APIKey: "sk-test-key",
		BaseURL: srv.URL + "/flaky/anthropic", Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}
	resp, err := flaky.Complete(t.Context(), &llm.Request{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, resp.Message, llm.TextMessage(llm.RoleUser, "again"))
	if _, _, _, _, err := llmtest.Collect(flaky.Stream(t.Context(), &llm.Request{Messages: msgs})); err != nil {
		t.Fatal(err)
	}
	down, err := provider.New(provider.Config{Provider: provider.OpenAICompatible, Model: "m",
		BaseURL: srv.URL + "/down/chat-completions/v1", Retry: llm.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Complete(t.Context(), &llm.Request{Messages: msgs[:1]}); llm.KindOf(err) != llm.KindNetwork {
		t.Fatalf("down: err = %v, want a network error", err)
	}

	res, err := http.Get(srv.URL + "/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got []Request
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		path   string
		status int
	}{
		{"/flaky/anthropic/v1/messages", http.StatusTooManyRequests},
		{"/flaky/anthropic/v1/messages", http.StatusOK},
		{"/flaky/anthropic/v1/messages", http.StatusInternalServerError},
		{"/flaky/anthropic/v1/messages", http.StatusOK},
		{"/down/chat-completions/v1/chat/completions", 0},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].Method != http.MethodPost || got[i].Path != w.path || got[i].Status != w.status {
			t.Errorf("request %d = %s %s -> %d, want POST %s -> %d", i+1, got[i].Method, got[i].Path, got[i].Status, w.path, w.status)
		}
	}
	if k := got[0].Header.Get("X-Api-Key"); k != "sk-test-key" {
		t.Errorf("request 1 X-Api-Key = %q, want the configured key", k)
	}
}

func TestBadFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"no script":        {},
		"unknown protocol": {"--script", "x.yaml", "--protocol", "bedrock"},
		"missing script":   {"--script", filepath.Join(t.TempDir(), "absent.yaml")},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(args); err == nil {
				t.Fatal("expected an error")
			}
		})
	}
}

func TestBundledScriptsParse(t *testing.T) {
	if _, err := loadScripts("scripts"); err != nil {
		t.Fatal(err)
	}
}
