package provider_test

import (
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	llmprovider "github.com/agent-operator/agent-operator/internal/llm/provider"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// protocols maps a profile id to the wire protocol its adapter speaks.
var protocols = map[string]llmtest.Protocol{"openai": llmtest.OpenAIResponses, "anthropic": llmtest.Anthropic, "gemini": llmtest.Gemini}

// TestValidationMatrix is the matrix of seed 000 §9.12 over the three
// profiles, driving internal/loop Sessions through each real adapter (its
// official SDK, over HTTP) against the llmtest fake server of its wire
// protocol, which replays the same scripts the loop's own matrix gives the
// in-memory scripted client. The rows are those of looptest.RunMatrix.
func TestValidationMatrix(t *testing.T) {
	looptest.RunMatrix(t, adapterClient)
}

// adapterClient is the real adapter for the profile, built by provider.New
// against a fake server replaying s.
func adapterClient(t *testing.T, p loop.Profile, s *scripted.Script) loop.Client {
	t.Helper()
	proto, ok := protocols[p.ID()]
	if !ok {
		t.Fatalf("no wire protocol for profile %q", p.ID())
	}
	srv := llmtest.StartScript(t, proto, s)
	c, err := llmprovider.New(llmprovider.Config{Provider: p.ID(), Model: p.Model(), BaseURL: srv.BaseURL(), APIKey: "matrix-key",
		Retry: llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
