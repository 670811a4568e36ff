package loop

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Client is the part of the unified LLM client the loop uses (seed 000 §1.5):
// one request per call, no SDK-level tool loop. llm.Client satisfies it.
type Client interface {
	Complete(ctx context.Context, req *llm.Request) (*llm.Response, error)
	Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error]
}

// Profile is a provider profile (seed 000 §3.2): the tools, system prompt,
// provider options and capabilities for one model family. Implementations
// live in internal/loop/profile.
type Profile interface {
	// ID is the provider name: "openai", "anthropic", "gemini".
	ID() string
	// Model is the model identifier sent in requests.
	Model() string
	// Registry holds the profile's tools; custom tools may be registered on
	// top (latest wins).
	Registry() *tool.Registry
	// Prepare gathers, once at session start, what the system prompt needs
	// from env: the <environment> block, the git snapshot and the project
	// instruction files (seed 000 §6.2-6.5).
	Prepare(ctx context.Context, env tool.ExecutionEnvironment, now time.Time) (PromptContext, error)
	// BuildSystemPrompt assembles the layers of seed 000 §6.1 for one
	// request; it is called before every model call, so tools registered
	// later are described too.
	BuildSystemPrompt(pc PromptContext) string
	// ProviderOptions are passed as Request.ProviderOptions (may be nil).
	ProviderOptions() map[string]json.RawMessage
	// Capabilities are the profile's capability flags.
	Capabilities() Capabilities
	// WithModel returns the same profile for another model (subagent model
	// override), sharing the registry.
	WithModel(model string) Profile
}

// Capabilities are the capability flags of a profile.
type Capabilities struct {
	Reasoning         bool
	Streaming         bool
	ParallelToolCalls bool
	// ContextWindow is the model's context window in tokens (for the 80%
	// usage warning of seed 000 §5.5); 0 disables the warning.
	ContextWindow int
	// DefaultCommandTimeout is the shell default of the provider's native
	// agent (codex 10 s, Claude Code 120 s), used when
	// SessionConfig.DefaultCommandTimeout is zero.
	DefaultCommandTimeout time.Duration
}

// PromptContext is what a profile gathered at session start plus the
// host's user instructions (seed 000 §6.1 layers 2, 4 and 5).
type PromptContext struct {
	// Environment is the <environment> block and the git snapshot.
	Environment string
	// ProjectDocs are the discovered instruction files, root first.
	ProjectDocs string
	// UserInstructions come from SessionConfig and are appended last.
	UserInstructions string
	// DeferredTools is the catalogue of the tools behind tool_search (names
	// and one-line descriptions, toolsearch.go), listed with the available
	// tools; empty when every tool is sent.
	DeferredTools string
}
