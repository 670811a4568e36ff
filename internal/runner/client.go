package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/anthropic"
	"github.com/agent-operator/agent-operator/internal/llm/gemini"
	"github.com/agent-operator/agent-operator/internal/llm/openai"
	"github.com/agent-operator/agent-operator/internal/llm/provider"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/urlscope"
)

// ClientConfig is what a ClientFactory needs to build an LLM client (the
// session's part of provider.Config).
type ClientConfig struct {
	Provider string
	Model    string
	BaseURL  string
	// APIKey is read from the session's Secret by the runner. Never log it.
	APIKey string
	// Script is set for the scripted provider.
	Script *scripted.Script
	// OnRetry, if set, is told of each attempt the client makes again
	// (llm.RetryPolicy.OnRetry; the llm_client_retries metric).
	OnRetry func(attempt int, err error, wait time.Duration)
}

// ClientFactory builds the LLM client of a session.
type ClientFactory func(ctx context.Context, cfg ClientConfig) (loop.Client, error)

// ErrConfig is wrapped by errors caused by the session's configuration
// (a missing Secret or ConfigMap, a bad script): retrying does not help until
// the user fixes it.
var ErrConfig = errors.New("session configuration")

// LabelLLMCredentials opts a Secret in as an API key of AgentSessions: only
// a Secret labelled agent-operator.dev/llm-credentials: "true" may be named
// by spec.model.apiKeySecretRef. Without it the manager, which may read any
// Secret of the namespaces it serves, would send any Secret's value to any
// base URL for whoever may create AgentSessions.
const LabelLLMCredentials = "agent-operator.dev/llm-credentials"

// AnnotationAllowedBaseURLs optionally restricts where an opted-in key may
// be sent: a comma- or whitespace-separated list of http(s) URLs. A session
// may use the Secret only when its base URL (spec.model.baseURL, or the
// provider's default endpoint when empty) has the scheme and host of one of
// them and a path under that URL's path.
const AnnotationAllowedBaseURLs = urlscope.Annotation

// ErrJournalLost is wrapped when a session that already recorded events finds
// its journal empty (the NATS store was lost or the events expired).
var ErrJournalLost = errors.New("the journal of this session is empty")

// ProviderClients is the ClientFactory of the manager: provider.New with the
// session's provider, model, base URL, key and script.
func ProviderClients(_ context.Context, cfg ClientConfig) (loop.Client, error) {
	pc := provider.Config{
		Provider: cfg.Provider, Model: cfg.Model, BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Script: cfg.Script,
	}
	if cfg.OnRetry != nil {
		pc.Retry = llm.DefaultRetryPolicy()
		pc.Retry.OnRetry = cfg.OnRetry
	}
	c, err := provider.New(pc)
	if err != nil {
		return nil, fmt.Errorf("new llm client: %w", err)
	}
	return c, nil
}

// clientConfig resolves the API key or the script of a session. It reads the
// Secret and ConfigMap with reader (the manager's uncached API reader, so the
// manager needs only get on them); scripts are parsed once per ConfigMap
// revision (scripts).
func clientConfig(ctx context.Context, reader client.Reader, scripts *scriptCache, s *agentsv1.AgentSession) (ClientConfig, error) {
	m := s.Spec.Model
	cfg := ClientConfig{Provider: string(m.Provider), Model: m.Name, BaseURL: m.BaseURL}
	if ref := m.APIKeySecretRef; ref != nil {
		var sec corev1.Secret
		if err := reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &sec); err != nil {
			return cfg, fmt.Errorf("%w: get api key secret %s: %w", ErrConfig, ref.Name, err)
		}
		if err := credentialOptIn(&sec, m.Provider, m.BaseURL); err != nil {
			return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		key, ok := sec.Data[ref.Key]
		if !ok || len(key) == 0 {
			return cfg, fmt.Errorf("%w: secret %s has no key %q", ErrConfig, ref.Name, ref.Key)
		}
		cfg.APIKey = string(key)
	}
	if ref := m.ScriptConfigMapRef; ref != nil {
		key := ref.Key
		if key == "" {
			key = "script.yaml"
		}
		script, err := scripts.script(ctx, reader, s.Namespace, ref.Name, key)
		if err != nil {
			return cfg, err
		}
		cfg.Script = script
	}
	return cfg, nil
}

// credentialOptIn returns why sec may not be used as the API key of a
// session of provider at baseURL, or nil when it may.
func credentialOptIn(sec *corev1.Secret, p agentsv1.Provider, baseURL string) error {
	if sec.Labels[LabelLLMCredentials] != "true" {
		return fmt.Errorf("secret %s is not opted in as an LLM API key: the manager sends only Secrets labelled %s=true "+
			"(kubectl label secret %s %s=true); no request was sent", sec.Name, LabelLLMCredentials, sec.Name, LabelLLMCredentials)
	}
	allowed, ok := sec.Annotations[AnnotationAllowedBaseURLs]
	if !ok {
		return nil
	}
	target := baseURL
	if target == "" {
		target = defaultBaseURL(p)
	}
	if urlscope.Allows(allowed, target) {
		return nil
	}
	return fmt.Errorf("secret %s may not be sent to %s: its annotation %s allows only %q; no request was sent",
		sec.Name, target, AnnotationAllowedBaseURLs, allowed)
}

// defaultBaseURL is the endpoint a provider's client uses without a base URL.
func defaultBaseURL(p agentsv1.Provider) string {
	switch p {
	case agentsv1.ProviderAnthropic:
		return anthropic.DefaultBaseURL
	case agentsv1.ProviderOpenAI:
		return openai.DefaultBaseURL
	case agentsv1.ProviderGemini:
		return gemini.DefaultBaseURL
	}
	return ""
}
