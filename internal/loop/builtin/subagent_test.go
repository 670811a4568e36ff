package builtin

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestSubagentToolsWithoutSpawner(t *testing.T) {
	env, _ := newEnv(t)
	tests := []struct {
		reg  tool.Registered
		args map[string]any
	}{
		{SpawnAgent(OpenAI), map[string]any{"task": "x"}},
		{SendInput(OpenAI), map[string]any{"agent_id": "a", "message": "m"}},
		{Wait(OpenAI), map[string]any{"agent_id": "a"}},
		{CloseAgent(OpenAI), map[string]any{"agent_id": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.reg.Definition.Name, func(t *testing.T) {
			res, _ := call{env: env}.run(t, tt.reg, tt.args)
			if !res.IsError || res.Output != NoSubagentsMessage {
				t.Errorf("result = %+v, want error %q", res, NoSubagentsMessage)
			}
		})
	}
}

// recordingSpawner is a minimal tool.SubagentSpawner that records calls.
// TODO: replace with the loop's in-process spawner once it exists.
type recordingSpawner struct {
	spawned []tool.SpawnRequest
	inputs  []string
	known   string
}

var errUnknownAgent = errors.New("unknown agent")

func (s *recordingSpawner) Spawn(_ context.Context, req tool.SpawnRequest) (tool.SpawnResult, error) {
	s.spawned = append(s.spawned, req)
	return tool.SpawnResult{AgentID: s.known, Status: "running"}, nil
}

func (s *recordingSpawner) SendInput(_ context.Context, id, msg string) error {
	if id != s.known {
		return errUnknownAgent
	}
	s.inputs = append(s.inputs, msg)
	return nil
}

func (s *recordingSpawner) Wait(_ context.Context, id string) (tool.SubAgentResult, error) {
	if id != s.known {
		return tool.SubAgentResult{}, errUnknownAgent
	}
	return tool.SubAgentResult{Output: "tests written", Success: true, TurnsUsed: 4}, nil
}

func (s *recordingSpawner) Close(_ context.Context, id string) (string, error) {
	if id != s.known {
		return "", errUnknownAgent
	}
	return "completed", nil
}

func TestSubagentTools(t *testing.T) {
	env, _ := newEnv(t)
	sp := &recordingSpawner{known: "agent-1"}
	c := call{env: env, subagents: sp}
	tests := []struct {
		name    string
		reg     tool.Registered
		args    map[string]any
		want    string
		isError bool
		has     []string
	}{
		{name: "spawn", reg: SpawnAgent(Anthropic), args: map[string]any{"task": "write tests", "working_dir": "pkg", "max_turns": 5},
			want: `{"agent_id":"agent-1","status":"running"}`},
		{name: "spawn without task", reg: SpawnAgent(Anthropic), args: map[string]any{"task": ""}, isError: true, has: []string{`"task" parameter`}},
		{name: "send input", reg: SendInput(Anthropic), args: map[string]any{"agent_id": "agent-1", "message": "also lint"},
			want: "Message sent to agent agent-1."},
		{name: "send input without message", reg: SendInput(Anthropic), args: map[string]any{"agent_id": "agent-1"}, isError: true, has: []string{`"message"`}},
		{name: "wait", reg: Wait(Anthropic), args: map[string]any{"agent_id": "agent-1"},
			want: `{"agent_id":"agent-1","output":"tests written","success":true,"turns_used":4}`},
		{name: "wait for unknown agent", reg: Wait(Anthropic), args: map[string]any{"agent_id": "agent-9"},
			isError: true, has: []string{"cannot wait for agent agent-9", "unknown agent"}},
		{name: "close", reg: CloseAgent(Anthropic), args: map[string]any{"agent_id": "agent-1"},
			want: `{"agent_id":"agent-1","status":"completed"}`},
		{name: "close without id", reg: CloseAgent(Anthropic), args: map[string]any{}, isError: true, has: []string{`"agent_id"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := c.run(t, tt.reg, tt.args)
			expect(t, res, tt.isError, tt.has...)
			if tt.want != "" && res.Output != tt.want {
				t.Errorf("output = %s, want %s", res.Output, tt.want)
			}
		})
	}
	if want := []tool.SpawnRequest{{CallID: "call-1", Task: "write tests", WorkingDir: "pkg", MaxTurns: 5}}; !reflect.DeepEqual(sp.spawned, want) {
		t.Errorf("spawn requests = %+v, want %+v", sp.spawned, want)
	}
	if len(sp.inputs) != 1 || sp.inputs[0] != "also lint" {
		t.Errorf("inputs = %v", sp.inputs)
	}
}

// spawn_agent's mcp_servers reaches the spawner as given: absent (or null)
// is nil, which inherits every server, and [] is empty, not nil, which
// gives the child none. An empty name is an error result and spawns nothing.
func TestSpawnAgentMCPServers(t *testing.T) {
	env, _ := newEnv(t)
	tests := []struct {
		name    string
		args    string
		want    []string // the request's MCPServers
		isNil   bool
		isError string
	}{
		{name: "absent inherits", args: `{"task":"t"}`, isNil: true},
		{name: "null inherits", args: `{"task":"t","mcp_servers":null}`, isNil: true},
		{name: "empty array is none", args: `{"task":"t","mcp_servers":[]}`, want: []string{}},
		{name: "a subset", args: `{"task":"t","mcp_servers":["tracker","docs"]}`, want: []string{"tracker", "docs"}},
		{name: "an empty name", args: `{"task":"t","mcp_servers":["tracker"," "]}`, isError: "an empty name"},
		{name: "not an array", args: `{"task":"t","mcp_servers":"tracker"}`, isError: "Invalid arguments for spawn_agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := &recordingSpawner{known: "agent-1"}
			res, _ := call{env: env, subagents: sp}.run(t, SpawnAgent(OpenAI), tt.args)
			if tt.isError != "" {
				expect(t, res, true, tt.isError)
				if len(sp.spawned) != 0 {
					t.Errorf("spawned %+v after an error result", sp.spawned)
				}
				return
			}
			expect(t, res, false)
			if len(sp.spawned) != 1 {
				t.Fatalf("spawn requests = %+v", sp.spawned)
			}
			got := sp.spawned[0].MCPServers
			if (got == nil) != tt.isNil || (!tt.isNil && !reflect.DeepEqual(got, tt.want)) {
				t.Errorf("MCPServers = %#v, want %#v (nil: %v)", got, tt.want, tt.isNil)
			}
		})
	}
}
