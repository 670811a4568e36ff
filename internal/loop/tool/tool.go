package tool

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Definition describes a tool to the model (name, description, JSON Schema
// parameters whose root is an object).
type Definition = llm.ToolDefinition

// Executor runs one tool call. Anything the model can fix (bad arguments the
// schema did not catch, missing file, non-unique edit, non-zero exit) is
// returned as a Result with IsError set and a nil error. A non-nil error is
// also reported to the model as an error result ("Tool error (name): ...");
// it never stops the session.
type Executor func(ctx context.Context, inv *Invocation) (Result, error)

// Registered is a tool as the registry holds it.
type Registered struct {
	Definition Definition
	Executor   Executor
	// Idempotent tools are run again, with the same call id, when a restored
	// journal shows the call started and never ended: running them twice
	// has the effect of running them once (spawn_agent adopts the child its
	// first run created). Every other such call is reported interrupted.
	Idempotent bool
}

// Invocation is everything an executor may use.
type Invocation struct {
	CallID    string
	Name      string
	Arguments json.RawMessage // already validated against the schema
	Env       ExecutionEnvironment
	// Subagents is nil when the session may not spawn subagents (depth limit
	// reached or no spawner configured); subagent tools then return an error
	// result saying so.
	Subagents SubagentSpawner
	// DefaultTimeout and MaxTimeout bound shell commands (SessionConfig,
	// adjusted by the provider profile).
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// Output streams incremental output (TOOL_CALL_OUTPUT_DELTA). Never nil.
	Output func(delta string)
	// Files tracks what the model has seen of each file and serializes
	// edits per file; nil disables the stale-file checks.
	Files FileViews
}

// Result is a tool's output as the model will see it before truncation.
type Result struct {
	Output  string
	IsError bool
	Images  []llm.Image // e.g. read_file on an image, for multimodal models
}

// SubagentSpawner creates and drives child agents (seed 000 §7). The loop
// ships an in-process implementation; the operator implements it by creating
// child AgentSession resources.
type SubagentSpawner interface {
	Spawn(ctx context.Context, req SpawnRequest) (SpawnResult, error)
	SendInput(ctx context.Context, agentID, message string) error
	Wait(ctx context.Context, agentID string) (SubAgentResult, error)
	Close(ctx context.Context, agentID string) (status string, err error)
}

// SpawnRequest are the spawn_agent arguments.
type SpawnRequest struct {
	// CallID is the id of the spawn_agent call: a spawner derives the child's
	// identity from it, so a call run again after a crash finds the child the
	// first run created instead of making a second one.
	CallID     string `json:"-"`
	Task       string `json:"task"`
	WorkingDir string `json:"working_dir,omitempty"`
	Model      string `json:"model,omitempty"`
	MaxTurns   int    `json:"max_turns,omitempty"`
	// MCPServers narrows the child's MCP servers to these of the parent's
	// (by name) when it is non-nil; empty means none. Nil inherits every
	// server of the parent. A child never gets a server its parent lacks.
	// Not omitempty: encoded, nil (null) and empty ([]) stay apart.
	MCPServers []string `json:"mcp_servers"`
}

// SpawnResult identifies a new subagent.
type SpawnResult struct {
	AgentID string `json:"agent_id"`
	Status  string `json:"status"` // running | completed | failed
}

// SubAgentResult is what wait returns.
type SubAgentResult struct {
	Output    string `json:"output"`
	Success   bool   `json:"success"`
	TurnsUsed int    `json:"turns_used"`
}
