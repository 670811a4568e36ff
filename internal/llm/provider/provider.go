package provider

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/anthropic"
	"github.com/agent-operator/agent-operator/internal/llm/gemini"
	"github.com/agent-operator/agent-operator/internal/llm/openai"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

// Provider names.
const (
	Anthropic        = "anthropic"
	OpenAI           = "openai"
	OpenAICompatible = "openai-compatible"
	Gemini           = "gemini"
	Scripted         = "scripted"
)

// Names lists the valid provider names.
var Names = []string{Anthropic, OpenAI, OpenAICompatible, Gemini, Scripted}

// Config selects and configures a provider.
type Config struct {
	// Provider is one of Names.
	Provider string
	// Model is used when a Request leaves Model empty.
	Model string
	// BaseURL overrides the provider's endpoint (required for
	// openai-compatible, e.g. http://vllm:8000/v1).
	BaseURL string
	// APIKey is the credential; empty sends none.
	APIKey string
	// Script is the script of the scripted provider.
	Script *scripted.Script
	// Retry is the retry policy; the zero value means
	// llm.DefaultRetryPolicy(). Set MaxAttempts to 1 for no retries.
	Retry llm.RetryPolicy
	// StreamIdleTimeout ends streams idle for this long (adapter default
	// when zero, disabled when negative).
	StreamIdleTimeout time.Duration
	HTTPClient        *http.Client
}

// New returns the client for cfg, wrapped in llm.WithRetry.
func New(cfg Config) (llm.Client, error) {
	var c llm.Client
	var err error
	switch strings.ToLower(strings.TrimSpace(cfg.Provider)) {
	case Anthropic:
		c, err = anthropic.New(anthropic.Config{APIKey: cfg.APIKey, BaseURL: cfg.BaseURL, Model: cfg.Model,
			StreamIdleTimeout: cfg.StreamIdleTimeout, HTTPClient: cfg.HTTPClient})
	case OpenAI:
		c, err = openai.New(openai.Config{APIKey: cfg.APIKey, BaseURL: cfg.BaseURL, Model: cfg.Model,
			StreamIdleTimeout: cfg.StreamIdleTimeout, HTTPClient: cfg.HTTPClient})
	case OpenAICompatible:
		if cfg.BaseURL == "" {
			return nil, fmt.Errorf("provider %s: a base URL is required (e.g. http://vllm:8000/v1)", OpenAICompatible)
		}
		c, err = openai.NewCompat(openai.Config{APIKey: cfg.APIKey, BaseURL: cfg.BaseURL, Model: cfg.Model,
			StreamIdleTimeout: cfg.StreamIdleTimeout, HTTPClient: cfg.HTTPClient})
	case Gemini:
		c, err = gemini.New(gemini.Config{APIKey: cfg.APIKey, BaseURL: cfg.BaseURL, Model: cfg.Model,
			StreamIdleTimeout: cfg.StreamIdleTimeout, HTTPClient: cfg.HTTPClient})
	case Scripted:
		if cfg.Script == nil {
			return nil, fmt.Errorf("provider %s: a script is required", Scripted)
		}
		c = scripted.New(cfg.Script, cfg.Model)
	default:
		return nil, fmt.Errorf("unknown LLM provider %q: valid providers are %s", cfg.Provider, strings.Join(Names, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("create %s client: %w", cfg.Provider, err)
	}
	policy := cfg.Retry
	if policy.IsZero() {
		policy = llm.DefaultRetryPolicy()
	}
	return llm.WithRetry(c, policy), nil
}
