package runner

import (
	"context"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm"
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
	cfg.Compaction.ContextWindow = int(spec.Model.ContextWindow)
	cfg.Compaction.Model = spec.Model.CompactionModel
	return cfg
}

// toolSearchConfig maps spec.tools.toolSearch onto the loop's: when the MCP
// tools are deferred behind tool_search. Listing tool_search in
// spec.tools.disabledTools disables it too.
func toolSearchConfig(spec *agentsv1.AgentSessionSpec) loop.ToolSearchConfig {
	var c loop.ToolSearchConfig
	if slices.Contains(spec.Tools.DisabledTools, loop.ToolSearchToolName) {
		c.Disabled = true
	}
	ts := spec.Tools.ToolSearch
	if ts == nil {
		return c
	}
	c.Disabled = c.Disabled || ts.Disabled
	if ts.Threshold != nil {
		c.Threshold = int(*ts.Threshold)
	}
	if ts.ThresholdBytes != nil {
		c.ThresholdBytes = int(*ts.ThresholdBytes)
	}
	return c
}

// webSearchConfig maps spec.tools.webSearch onto the web search option of
// every model request (nil when it is not enabled). The API rejects
// options the provider cannot honour; an adapter would also fail them.
func webSearchConfig(spec *agentsv1.AgentSessionSpec) *llm.WebSearch {
	ws := spec.Tools.WebSearch
	if ws == nil || !ws.Enabled {
		return nil
	}
	c := &llm.WebSearch{AllowedDomains: slices.Clone(ws.AllowedDomains), BlockedDomains: slices.Clone(ws.BlockedDomains)}
	if ws.MaxUses != nil {
		c.MaxUses = int(*ws.MaxUses)
	}
	return c
}

// sessionLoopConfig is loopConfig plus what must be read from the API
// server: the skills of spec.skills' ConfigMaps. A missing ConfigMap or key
// is a configuration error; a key that does not parse as a SKILL.md is left
// out and reported by the loop as a WARNING event (SkillWarnings).
func sessionLoopConfig(ctx context.Context, reader client.Reader, s *agentsv1.AgentSession) (loop.SessionConfig, error) {
	cfg := loopConfig(&s.Spec)
	skills, problems, err := configMapSkills(ctx, reader, s.Namespace, s.Spec.Skills)
	if err != nil {
		return cfg, err
	}
	cfg.Skills, cfg.SkillWarnings = skills, problems
	return cfg, nil
}

// configMapSkills reads the skills of refs: each selected key of each
// ConfigMap is one SKILL.md. The first skill of a name wins.
func configMapSkills(ctx context.Context, reader client.Reader, ns string, refs []agentsv1.SkillsConfigMapRef) ([]loop.Skill, []string, error) {
	var (
		skills   []loop.Skill
		problems []string
		seen     = map[string]bool{}
	)
	for _, ref := range refs {
		var cm corev1.ConfigMap
		if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &cm); err != nil {
			return nil, nil, fmt.Errorf("%w: get skills configmap %s: %w", ErrConfig, ref.Name, err)
		}
		found, bad, err := skillsFromConfigMap(&cm, ref.Keys)
		if err != nil {
			return nil, nil, err
		}
		problems = append(problems, bad...)
		for _, sk := range found {
			if seen[sk.Name] {
				problems = append(problems, fmt.Sprintf("skill %s: a skill named %q was already loaded; this one is ignored", sk.Source, sk.Name))
				continue
			}
			seen[sk.Name] = true
			skills = append(skills, sk)
		}
	}
	return skills, problems, nil
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

// buildProfile returns the provider profile, with web_fetch when
// spec.tools.webFetch enables it (fetch.go), and disabled tools removed.
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
	if wf := webFetchTool(spec); wf != nil {
		if err := p.Register(*wf); err != nil {
			return nil, fmt.Errorf("build profile: %w", err)
		}
	}
	for _, t := range spec.Tools.DisabledTools {
		p.Registry().Unregister(t)
	}
	return p, nil
}

// skillsFromConfigMap parses the selected keys of cm (every key when keys
// is empty, in name order) as SKILL.md files. A missing key is an error;
// a key that does not parse is returned as a problem.
func skillsFromConfigMap(cm *corev1.ConfigMap, keys []string) ([]loop.Skill, []string, error) {
	if len(keys) == 0 {
		for k := range cm.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	var (
		skills   []loop.Skill
		problems []string
	)
	for _, k := range keys {
		data, ok := cm.Data[k]
		if !ok {
			return nil, nil, fmt.Errorf("%w: skills configmap %s has no key %q", ErrConfig, cm.Name, k)
		}
		source := "configmap/" + cm.Name + "/" + k
		sk, err := loop.ParseSkill([]byte(data), source)
		if err != nil {
			problems = append(problems, fmt.Sprintf("skill %s: %v", source, err))
			continue
		}
		skills = append(skills, sk)
	}
	return skills, problems, nil
}
