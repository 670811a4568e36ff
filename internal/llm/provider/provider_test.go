package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

func TestUnknownProviderListsValidNames(t *testing.T) {
	_, err := New(Config{Provider: "bedrock"})
	if err == nil {
		t.Fatal("expected an error")
	}
	for _, n := range Names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("error %q does not list %q", err, n)
		}
	}
}

func TestMissingSettings(t *testing.T) {
	for _, cfg := range []Config{{Provider: Scripted}, {Provider: OpenAICompatible}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("%s: expected an error", cfg.Provider)
		}
	}
}

// TestEveryProviderRetries drives each provider through its fake server:
// one scripted 503, then an answer, through the client New returns.
func TestEveryProviderRetries(t *testing.T) {
	const script = `turns: [{error: {kind: server, statusCode: 503, times: 1}, text: "hello"}]`
	protocols := map[string]llmtest.Protocol{Anthropic: llmtest.Anthropic, OpenAI: llmtest.OpenAIResponses,
		OpenAICompatible: llmtest.ChatCompletions, Gemini: llmtest.Gemini}
	retry := llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	for name, proto := range protocols {
		t.Run(name, func(t *testing.T) {
			srv := llmtest.StartScript(t, proto, llmtest.ParseScript(t, script))
			c, err := New(Config{Provider: name, Model: "m", BaseURL: srv.BaseURL(), APIKey: "k", Retry: retry})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Complete(t.Context(), &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text() != "hello" || len(srv.Requests()) != 2 {
				t.Fatalf("text %q after %d requests", resp.Text(), len(srv.Requests()))
			}
		})
	}
	t.Run(Scripted, func(t *testing.T) {
		c, err := New(Config{Provider: Scripted, Script: llmtest.ParseScript(t, script), Retry: retry})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Complete(t.Context(), &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
		if err != nil || resp.Text() != "hello" {
			t.Fatalf("resp %+v err %v", resp, err)
		}
	})
}
