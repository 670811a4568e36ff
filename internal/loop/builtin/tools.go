package builtin

import "github.com/agent-operator/agent-operator/internal/loop/tool"

// Tools returns the built-in toolset seed 000 §3 lists for the provider of
// v, subagent tools included (they answer with an error result when the
// session may not spawn subagents):
//
//   - OpenAI: read_file, apply_patch, write_file, shell, grep, glob
//   - Anthropic: read_file, write_file, edit_file, shell, grep, glob
//   - Gemini: read_file, read_many_files, write_file, edit_file, shell, grep,
//     glob, list_dir
//
// followed by spawn_agent, send_input, wait and close_agent. An unknown
// variant gets the OpenAI descriptions and the Anthropic tool list.
func Tools(v Variant) []tool.Registered {
	var ts []tool.Registered
	switch v {
	case OpenAI:
		ts = []tool.Registered{ReadFile(v), ApplyPatch(v), WriteFile(v), Shell(v), Grep(v), Glob(v)}
	case Gemini:
		ts = []tool.Registered{ReadFile(v), ReadManyFiles(v), WriteFile(v), EditFile(v), Shell(v), Grep(v), Glob(v), ListDir(v)}
	default:
		ts = []tool.Registered{ReadFile(v), WriteFile(v), EditFile(v), Shell(v), Grep(v), Glob(v)}
	}
	return append(ts, SpawnAgent(v), SendInput(v), Wait(v), CloseAgent(v))
}
