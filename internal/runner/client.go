package runner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm/provider"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
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
}

// ClientFactory builds the LLM client of a session.
type ClientFactory func(ctx context.Context, cfg ClientConfig) (loop.Client, error)

// ErrConfig is wrapped by errors caused by the session's configuration
// (a missing Secret or ConfigMap, a bad script): retrying does not help until
// the user fixes it.
var ErrConfig = errors.New("session configuration")

// ErrJournalLost is wrapped when a session that already recorded events finds
// its journal empty (the NATS store was lost or the events expired).
var ErrJournalLost = errors.New("the journal of this session is empty")

// ProviderClients is the ClientFactory of the manager: provider.New with the
// session's provider, model, base URL, key and script.
func ProviderClients(_ context.Context, cfg ClientConfig) (loop.Client, error) {
	c, err := provider.New(provider.Config{
		Provider: cfg.Provider, Model: cfg.Model, BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Script: cfg.Script,
	})
	if err != nil {
		return nil, fmt.Errorf("new llm client: %w", err)
	}
	return c, nil
}

// clientConfig resolves the API key or the script of a session. It reads the
// Secret and ConfigMap with reader (the manager's uncached API reader, so the
// manager needs only get on them).
func clientConfig(ctx context.Context, reader client.Reader, s *agentsv1.AgentSession) (ClientConfig, error) {
	m := s.Spec.Model
	cfg := ClientConfig{Provider: string(m.Provider), Model: m.Name, BaseURL: m.BaseURL}
	if ref := m.APIKeySecretRef; ref != nil {
		var sec corev1.Secret
		if err := reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &sec); err != nil {
			return cfg, fmt.Errorf("%w: get api key secret %s: %w", ErrConfig, ref.Name, err)
		}
		key, ok := sec.Data[ref.Key]
		if !ok || len(key) == 0 {
			return cfg, fmt.Errorf("%w: secret %s has no key %q", ErrConfig, ref.Name, ref.Key)
		}
		cfg.APIKey = string(key)
	}
	if ref := m.ScriptConfigMapRef; ref != nil {
		var cm corev1.ConfigMap
		if err := reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &cm); err != nil {
			return cfg, fmt.Errorf("%w: get script configmap %s: %w", ErrConfig, ref.Name, err)
		}
		key := ref.Key
		if key == "" {
			key = "script.yaml"
		}
		data, ok := cm.Data[key]
		if !ok {
			return cfg, fmt.Errorf("%w: configmap %s has no key %q", ErrConfig, ref.Name, key)
		}
		script, err := scripted.Parse([]byte(data))
		if err != nil {
			return cfg, fmt.Errorf("%w: configmap %s: %w", ErrConfig, ref.Name, err)
		}
		cfg.Script = script
	}
	return cfg, nil
}
