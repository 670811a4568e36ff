package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/builtin"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Profile is a provider profile. Create one with OpenAI, Anthropic or
// Gemini; register custom tools on Registry() (latest wins).
type Profile struct {
	id        string
	model     string
	base      string   // provider-specific base instructions
	docFiles  []string // instruction files besides AGENTS.md
	registry  *tool.Registry
	caps      loop.Capabilities
	options   map[string]json.RawMessage
	gitBudget time.Duration
}

var _ loop.Profile = (*Profile)(nil)

func newProfile(id, model, base string, v builtin.Variant, docFiles []string, caps loop.Capabilities,
	options map[string]json.RawMessage) *Profile {
	reg := tool.NewRegistry()
	for _, t := range builtin.Tools(v) {
		if err := reg.Register(t); err != nil {
			panic(fmt.Sprintf("profile %s: built-in tool %s: %v", id, t.Definition.Name, err)) // programming error
		}
	}
	return &Profile{id: id, model: model, base: base, docFiles: docFiles, registry: reg, caps: caps,
		options: options, gitBudget: 5 * time.Second}
}

// OpenAI returns the codex-aligned profile: read_file, apply_patch,
// write_file, shell (10 s default), grep, glob and the subagent tools.
func OpenAI(model string) *Profile {
	return newProfile("openai", model, openAIBase, builtin.OpenAI, []string{".codex/instructions.md"},
		loop.Capabilities{Reasoning: true, Streaming: true, ParallelToolCalls: true,
			ContextWindow: contextWindow(model, 400_000), DefaultCommandTimeout: 10 * time.Second}, nil)
}

// AnthropicBetaHeaders are the beta headers the Anthropic profile sends
// (interleaved thinking between tool calls).
var AnthropicBetaHeaders = []string{"interleaved-thinking-2025-05-14"}

// Anthropic returns the Claude Code-aligned profile: read_file, write_file,
// edit_file, shell (120 s default), grep, glob and the subagent tools.
func Anthropic(model string) *Profile {
	opts := map[string]json.RawMessage{"anthropic": mustJSON(map[string]any{"beta_headers": AnthropicBetaHeaders})}
	return newProfile("anthropic", model, anthropicBase, builtin.Anthropic, []string{"CLAUDE.md"},
		loop.Capabilities{Reasoning: true, Streaming: true, ParallelToolCalls: true,
			ContextWindow: contextWindow(model, 200_000), DefaultCommandTimeout: 120 * time.Second}, opts)
}

// GeminiSafetySettings are the safety settings the Gemini profile sends:
// block only high-probability harm, so code about security topics is not
// refused.
var GeminiSafetySettings = []map[string]string{
	{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"},
	{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_ONLY_HIGH"},
	{"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "threshold": "BLOCK_ONLY_HIGH"},
	{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_ONLY_HIGH"},
}

// Gemini returns the gemini-cli-aligned profile: read_file,
// read_many_files, write_file, edit_file, shell (10 s default), grep, glob,
// list_dir and the subagent tools.
func Gemini(model string) *Profile {
	opts := map[string]json.RawMessage{"gemini": mustJSON(map[string]any{"safety_settings": GeminiSafetySettings})}
	return newProfile("gemini", model, geminiBase, builtin.Gemini, []string{"GEMINI.md"},
		loop.Capabilities{Reasoning: true, Streaming: true, ParallelToolCalls: true,
			ContextWindow: contextWindow(model, 1_048_576), DefaultCommandTimeout: 10 * time.Second}, opts)
}

// ID implements loop.Profile.
func (p *Profile) ID() string { return p.id }

// Model implements loop.Profile.
func (p *Profile) Model() string { return p.model }

// Registry implements loop.Profile.
func (p *Profile) Registry() *tool.Registry { return p.registry }

// Register adds a custom tool on top of the profile's tools (latest wins).
func (p *Profile) Register(t tool.Registered) error { return p.registry.Register(t) }

// ProviderOptions implements loop.Profile.
func (p *Profile) ProviderOptions() map[string]json.RawMessage { return p.options }

// Capabilities implements loop.Profile.
func (p *Profile) Capabilities() loop.Capabilities { return p.caps }

// WithModel implements loop.Profile; the copy shares the registry.
func (p *Profile) WithModel(model string) loop.Profile {
	c := *p
	c.model = model
	c.caps.ContextWindow = contextWindow(model, p.caps.ContextWindow)
	return &c
}

// InstructionFiles returns the project instruction files the profile loads,
// AGENTS.md first.
func (p *Profile) InstructionFiles() []string {
	return append([]string{"AGENTS.md"}, p.docFiles...)
}

// BuildSystemPrompt implements loop.Profile: base instructions, environment
// context, tool descriptions, project instructions, user instructions
// (seed 000 §6.1, later layers take precedence).
func (p *Profile) BuildSystemPrompt(pc loop.PromptContext) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(p.base))
	if pc.Environment != "" {
		b.WriteString("\n\n" + pc.Environment)
	}
	b.WriteString("\n\n# Available tools\n\n")
	for _, d := range p.registry.Definitions() {
		desc, _, _ := strings.Cut(strings.TrimSpace(d.Description), "\n")
		fmt.Fprintf(&b, "- %s: %s\n", d.Name, desc)
	}
	if pc.DeferredTools != "" {
		b.WriteString("\n" + pc.DeferredTools + "\n")
	}
	if pc.ProjectDocs != "" {
		b.WriteString("\n# Project instructions\n\nThese files come from the repository; deeper directories take precedence.\n\n")
		b.WriteString(pc.ProjectDocs)
		b.WriteString("\n")
	}
	if pc.UserInstructions != "" {
		b.WriteString("\n# User instructions\n\nThese override everything above.\n\n")
		b.WriteString(pc.UserInstructions)
		b.WriteString("\n")
	}
	return b.String()
}

// Prepare implements loop.Profile: the environment block, the git snapshot
// and the project instructions, gathered through env. The instruction files
// of the working directory are read while the snapshot runs (they are read
// whatever it finds; only the directories above the working directory
// depend on the repository's root), and all of them at once.
func (p *Profile) Prepare(ctx context.Context, env tool.ExecutionEnvironment, now time.Time) (loop.PromptContext, error) {
	wd := env.WorkingDirectory()
	docs := newDocReads(ctx, env, p.InstructionFiles())
	docs.start(wd)
	g := gitSnapshot(ctx, env, p.gitBudget)
	if err := ctx.Err(); err != nil {
		return loop.PromptContext{}, err
	}
	root := wd
	if g.isRepo && g.root != "" {
		root = g.root
	}
	return loop.PromptContext{
		Environment: environmentBlock(env, g, now, p.model) + g.summary(),
		ProjectDocs: docs.join(root, dirsBetween(root, wd)),
	}, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // static values
	}
	return b
}
