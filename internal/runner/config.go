package runner

import (
	"fmt"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
)

// loopConfig maps the spec onto the loop's configuration.
func loopConfig(spec *agentsv1.AgentSessionSpec) loop.SessionConfig {
	cfg := loop.DefaultConfig()
	l := spec.Limits
	cfg.MaxTurns = int(l.MaxTurns)
	cfg.MaxToolRoundsPerInput = int(l.MaxToolRoundsPerInput)
	if l.DefaultCommandTimeout != nil {
		cfg.DefaultCommandTimeout = l.DefaultCommandTimeout.Duration
	}
	if l.MaxCommandTimeout != nil {
		cfg.MaxCommandTimeout = l.MaxCommandTimeout.Duration
	}
	cfg.ReasoningEffort = string(spec.Model.ReasoningEffort)
	if len(spec.Tools.OutputLimits) > 0 {
		cfg.ToolOutputLimits = make(map[string]int, len(spec.Tools.OutputLimits))
		for k, v := range spec.Tools.OutputLimits {
			cfg.ToolOutputLimits[k] = int(v)
		}
	}
	cfg.MaxSubagentDepth = loop.DefaultMaxSubagentDepth
	if spec.Subagents.MaxDepth != nil {
		cfg.MaxSubagentDepth = int(*spec.Subagents.MaxDepth)
	}
	cfg.UserInstructions = spec.Instructions
	return cfg
}

// profileName is the tool profile of a session: spec.tools.profile, else the
// one matching the provider. The scripted provider defaults to anthropic,
// whose tools (write_file, edit_file, shell, ...) are what scripts use.
func profileName(spec *agentsv1.AgentSessionSpec) string {
	if spec.Tools.Profile != "" {
		return spec.Tools.Profile
	}
	switch spec.Model.Provider {
	case agentsv1.ProviderOpenAI, agentsv1.ProviderOpenAICompatible:
		return "openai"
	case agentsv1.ProviderGemini:
		return "gemini"
	default:
		return "anthropic"
	}
}

// buildProfile returns the provider profile with disabled tools removed.
func buildProfile(spec *agentsv1.AgentSessionSpec) (*profile.Profile, error) {
	var p *profile.Profile
	switch name := profileName(spec); name {
	case "openai":
		p = profile.OpenAI(spec.Model.Name)
	case "anthropic":
		p = profile.Anthropic(spec.Model.Name)
	case "gemini":
		p = profile.Gemini(spec.Model.Name)
	default:
		return nil, fmt.Errorf("build profile: unknown profile %q", name)
	}
	for _, t := range spec.Tools.DisabledTools {
		p.Registry().Unregister(t)
	}
	return p, nil
}
