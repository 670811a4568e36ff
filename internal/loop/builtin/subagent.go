package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// NoSubagentsMessage is the error result of a subagent tool when the
// session may not spawn subagents.
const NoSubagentsMessage = "subagents are not available in this session (depth limit reached)"

// SpawnAgent returns the spawn_agent tool (seed 000 §7).
func SpawnAgent(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Spawns a subagent to handle a scoped task autonomously. The subagent has its own conversation, shares this workspace, " +
			"and runs until it finishes; use wait to get its result. Returns the agent_id. " +
			"It gets this session's MCP servers (the mcp__<server>__<tool> tools) unless mcp_servers names the ones it needs ([] for none).",
		Anthropic: "Launch a new agent to handle a complex, multi-step task autonomously.\n\n" +
			"When to use it:\n" +
			"- Independent parts of a task that can run in parallel (e.g. investigate two modules at once)\n" +
			"- Focused work scoped to one directory or module\n\n" +
			"Usage notes:\n" +
			"- Launch multiple agents concurrently whenever possible to maximize performance\n" +
			"- The agent works in the same filesystem; its final message is returned by wait and is not visible to the user, so summarize it\n" +
			"- Each agent invocation is stateless apart from messages you send with send_input. Your task should contain a highly detailed description of what the agent should do and what it should return\n" +
			"- The agent gets your MCP servers (the mcp__<server>__<tool> tools) unless mcp_servers names the ones it needs; pass [] to give it none",
		Gemini: "Delegates a scoped task to a subagent that runs its own agent loop in the same workspace. " +
			"Returns the new agent's id; call wait with it to collect the result. " +
			"The subagent gets this session's MCP servers (the mcp__<server>__<tool> tools) unless mcp_servers names the ones it needs ([] for none).",
	})
	schema := objectSchema([]string{"task"},
		p("task", "string", pick(v, map[Variant]string{
			OpenAI:    "Natural-language description of the task, with everything the subagent needs to know.",
			Anthropic: "The task for the agent to perform, described in detail",
			Gemini:    "A complete, self-contained description of the task for the subagent.",
		})),
		p("working_dir", "string", "Optional subdirectory of the working directory to scope the agent to."),
		p("model", "string", "Optional model override (default: this session's model)."),
		namedProp{"max_turns", prop{Type: "integer", Minimum: intMin(0), Description: "Optional turn limit for the subagent (default 0: unlimited)."}},
		namedProp{"mcp_servers", prop{Type: "array", Items: &prop{Type: "string"}, Description: mcpServersParam}},
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "spawn_agent", Description: desc, Parameters: schema},
		Executor:   spawnAgent,
		Idempotent: true,
	}
}

// mcpServersParam describes spawn_agent's mcp_servers parameter.
const mcpServersParam = "Optional names of this session's MCP servers the subagent may use (its tools named mcp__<server>__<tool>). " +
	"Leave it out to give the subagent all of this session's MCP servers; [] gives it none. " +
	"A subagent can never get a server this session does not have."

type spawnArgs struct {
	Task       string   `json:"task"`
	WorkingDir string   `json:"working_dir"`
	Model      string   `json:"model"`
	MaxTurns   flexInt  `json:"max_turns"`
	MCPServers []string `json:"mcp_servers"`
}

func spawnAgent(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	if inv.Subagents == nil {
		return errorResult(NoSubagentsMessage)
	}
	var a spawnArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if strings.TrimSpace(a.Task) == "" {
		return errorResult("Error: the \"task\" parameter is required and must describe the subagent's task.")
	}
	if a.MaxTurns.v < 0 {
		return errorResult("Error: max_turns must be 0 (unlimited) or greater (got %d).", a.MaxTurns.v)
	}
	for _, name := range a.MCPServers {
		if strings.TrimSpace(name) == "" {
			return errorResult("Error: mcp_servers must list MCP server names; an empty name is not one.")
		}
	}
	res, err := inv.Subagents.Spawn(ctx, tool.SpawnRequest{
		CallID: inv.CallID, Task: a.Task, WorkingDir: a.WorkingDir, Model: a.Model, MaxTurns: a.MaxTurns.v,
		MCPServers: a.MCPServers,
	})
	if err != nil {
		return subagentFailure(ctx, "spawn the agent", err)
	}
	return jsonResult(res)
}

func agentIDSchema(extra ...namedProp) json.RawMessage {
	props := append([]namedProp{p("agent_id", "string", "The id returned by spawn_agent.")}, extra...)
	req := []string{"agent_id"}
	for _, e := range extra {
		req = append(req, e.name)
	}
	return objectSchema(req, props...)
}

// SendInput returns the send_input tool.
func SendInput(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI:    "Sends a message to a running subagent (for example, to redirect it or answer its question).",
		Anthropic: "Send a follow-up message to a running agent started with spawn_agent.",
		Gemini:    "Sends a message to a running subagent.",
	})
	return tool.Registered{
		Definition: tool.Definition{Name: "send_input", Description: desc,
			Parameters: agentIDSchema(p("message", "string", "The message to send."))},
		Executor: sendInput,
	}
}

type agentArgs struct {
	AgentID string `json:"agent_id"`
	Message string `json:"message"`
}

func decodeAgent(inv *tool.Invocation, needMessage bool) (agentArgs, string, bool) {
	var a agentArgs
	if msg, ok := decode(inv, &a); !ok {
		return a, msg, false
	}
	if strings.TrimSpace(a.AgentID) == "" {
		return a, "Error: the \"agent_id\" parameter is required (the id returned by spawn_agent).", false
	}
	if needMessage && strings.TrimSpace(a.Message) == "" {
		return a, "Error: the \"message\" parameter is required and must not be empty.", false
	}
	return a, "", true
}

// agentExecutor runs fn with the decoded arguments after the checks every
// subagent tool shares: a spawner must be available and agent_id (and, when
// needMessage, message) must be given.
func agentExecutor(needMessage bool, fn func(context.Context, tool.SubagentSpawner, agentArgs) (tool.Result, error)) tool.Executor {
	return func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
		if inv.Subagents == nil {
			return errorResult(NoSubagentsMessage)
		}
		a, msg, ok := decodeAgent(inv, needMessage)
		if !ok {
			return errorResult("%s", msg)
		}
		return fn(ctx, inv.Subagents, a)
	}
}

var sendInput = agentExecutor(true, func(ctx context.Context, sp tool.SubagentSpawner, a agentArgs) (tool.Result, error) {
	if err := sp.SendInput(ctx, a.AgentID, a.Message); err != nil {
		return subagentFailure(ctx, "send input to agent "+a.AgentID, err)
	}
	return tool.Result{Output: fmt.Sprintf("Message sent to agent %s.", a.AgentID)}, nil
})

// Wait returns the wait tool. Its output is the SubAgentResult as JSON
// ({"agent_id", "output", "success", "turns_used"}).
func Wait(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI:    "Waits for a subagent to finish and returns its result: its final output, whether it succeeded, and the turns it used.",
		Anthropic: "Wait for an agent started with spawn_agent to complete and return its final report.",
		Gemini:    "Waits for a subagent to complete and returns its output, success flag and turns used.",
	})
	return tool.Registered{
		Definition: tool.Definition{Name: "wait", Description: desc, Parameters: agentIDSchema()},
		Executor:   wait,
	}
}

var wait = agentExecutor(false, func(ctx context.Context, sp tool.SubagentSpawner, a agentArgs) (tool.Result, error) {
	res, err := sp.Wait(ctx, a.AgentID)
	if err != nil {
		return subagentFailure(ctx, "wait for agent "+a.AgentID, err)
	}
	return jsonResult(struct {
		AgentID string `json:"agent_id"`
		tool.SubAgentResult
	}{a.AgentID, res})
})

// CloseAgent returns the close_agent tool.
func CloseAgent(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI:    "Terminates a subagent and returns its final status.",
		Anthropic: "Stop a running agent started with spawn_agent.",
		Gemini:    "Terminates a subagent and returns its final status.",
	})
	return tool.Registered{
		Definition: tool.Definition{Name: "close_agent", Description: desc, Parameters: agentIDSchema()},
		Executor:   closeAgent,
	}
}

var closeAgent = agentExecutor(false, func(ctx context.Context, sp tool.SubagentSpawner, a agentArgs) (tool.Result, error) {
	status, err := sp.Close(ctx, a.AgentID)
	if err != nil {
		return subagentFailure(ctx, "close agent "+a.AgentID, err)
	}
	return jsonResult(tool.SpawnResult{AgentID: a.AgentID, Status: status})
})

func subagentFailure(ctx context.Context, action string, err error) (tool.Result, error) {
	if cerr := ctx.Err(); cerr != nil {
		return tool.Result{}, cerr
	}
	return errorResult("Error: cannot %s: %v", action, err)
}

func jsonResult(v any) (tool.Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return tool.Result{}, fmt.Errorf("encode result: %w", err)
	}
	return tool.Result{Output: string(b)}, nil
}
