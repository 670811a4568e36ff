package builtin

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// baseParams are the parameters seed 000 §3.3 and §7 require in every
// variant.
var baseParams = map[string][]string{
	"read_file":       {"file_path", "offset", "limit"},
	"write_file":      {"file_path", "content"},
	"edit_file":       {"file_path", "old_string", "new_string", "replace_all"},
	"shell":           {"command", "timeout_ms", "description"},
	"grep":            {"pattern", "path", "glob_filter", "case_insensitive", "max_results"},
	"glob":            {"pattern", "path"},
	"list_dir":        {"path", "depth"},
	"read_many_files": {"paths"},
	"apply_patch":     {"patch"},
	"spawn_agent":     {"task", "working_dir", "model", "max_turns"},
	"send_input":      {"agent_id", "message"},
	"wait":            {"agent_id"},
	"close_agent":     {"agent_id"},
}

func allTools(v Variant) []tool.Registered {
	return []tool.Registered{ReadFile(v), WriteFile(v), EditFile(v), Shell(v), Grep(v), Glob(v), ListDir(v),
		ReadManyFiles(v), ApplyPatch(v), SpawnAgent(v), SendInput(v), Wait(v), CloseAgent(v)}
}

func TestSchemas(t *testing.T) {
	for _, v := range []Variant{OpenAI, Anthropic, Gemini} {
		reg := tool.NewRegistry()
		for _, rt := range allTools(v) {
			name := rt.Definition.Name
			if err := reg.Register(rt); err != nil {
				t.Errorf("%s/%s: Register: %v", v, name, err)
				continue
			}
			if rt.Definition.Description == "" {
				t.Errorf("%s/%s: empty description", v, name)
			}
			var schema struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			}
			if err := json.Unmarshal(rt.Definition.Parameters, &schema); err != nil {
				t.Fatalf("%s/%s: %v", v, name, err)
			}
			want, ok := baseParams[name]
			if !ok {
				t.Errorf("%s: unexpected tool %s", v, name)
			}
			for _, p := range want {
				if _, ok := schema.Properties[p]; !ok {
					t.Errorf("%s/%s: missing parameter %s", v, name, p)
				}
			}
			for _, r := range schema.Required {
				if _, ok := schema.Properties[r]; !ok {
					t.Errorf("%s/%s: required %s is not a property", v, name, r)
				}
			}
		}
		var mcpServers struct {
			Type  string `json:"type"`
			Items struct {
				Type string `json:"type"`
			} `json:"items"`
			Description string `json:"description"`
		}
		if err := json.Unmarshal(mustProps(t, SpawnAgent(v))["mcp_servers"], &mcpServers); err != nil ||
			mcpServers.Type != "array" || mcpServers.Items.Type != "string" || !strings.Contains(mcpServers.Description, "[] gives it none") {
			t.Errorf("%s: spawn_agent mcp_servers = %+v (%v), want an optional array of strings that says [] gives none", v, mcpServers, err)
		}
		if d := SpawnAgent(v).Definition.Description; !strings.Contains(d, "mcp_servers") {
			t.Errorf("%s: the spawn_agent description does not tell the model about mcp_servers: %q", v, d)
		}
		if err := reg.Validate("spawn_agent", json.RawMessage(`{"task":"t","mcp_servers":"tracker"}`)); err == nil {
			t.Errorf("%s: spawn_agent with a string mcp_servers passed validation", v)
		}
		_, hasMode := mustProps(t, Grep(v))["output_mode"]
		if hasMode != (v == Anthropic) {
			t.Errorf("%s: grep output_mode present = %v", v, hasMode)
		}
		// Typical model arguments pass the loop's validation.
		for name, args := range map[string]string{
			"read_file":   `{"file_path":"a.go","offset":10.0,"limit":20}`,
			"shell":       `{"command":"go test ./...","timeout_ms":60000,"description":"run tests"}`,
			"edit_file":   `{"file_path":"a","old_string":"x","new_string":"y","replace_all":true}`,
			"list_dir":    `{"path":"src","depth":2}`,
			"spawn_agent": `{"task":"t","max_turns":0,"mcp_servers":[]}`,
		} {
			if err := reg.Validate(name, json.RawMessage(args)); err != nil {
				t.Errorf("%s/%s: Validate(%s): %v", v, name, args, err)
			}
		}
		if err := reg.Validate("read_file", json.RawMessage(`{"offset":1}`)); err == nil {
			t.Errorf("%s: read_file without file_path passed validation", v)
		}
	}
}

func mustProps(t *testing.T, rt tool.Registered) map[string]json.RawMessage {
	t.Helper()
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(rt.Definition.Parameters, &s); err != nil {
		t.Fatal(err)
	}
	return s.Properties
}

func TestTools(t *testing.T) {
	subagents := []string{"spawn_agent", "send_input", "wait", "close_agent"}
	tests := []struct {
		v    Variant
		want []string
	}{
		{OpenAI, append([]string{"read_file", "apply_patch", "write_file", "shell", "grep", "glob"}, subagents...)},
		{Anthropic, append([]string{"read_file", "write_file", "edit_file", "shell", "grep", "glob"}, subagents...)},
		{Gemini, append([]string{"read_file", "read_many_files", "write_file", "edit_file", "shell", "grep", "glob", "list_dir"}, subagents...)},
	}
	for _, tt := range tests {
		var got []string
		for _, rt := range Tools(tt.v) {
			got = append(got, rt.Definition.Name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Tools(%s) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
