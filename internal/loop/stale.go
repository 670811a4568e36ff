package loop

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// DefaultStaleToolResultTurns is the age, in model turns, after which a
// tool result is sent as a one-line summary (seed 001).
const DefaultStaleToolResultTurns = 4

// staleMinChars is the size below which a stale result is sent as is: its
// summary would not be shorter.
const staleMinChars = 200

// staleTurns is the configured age of stale tool results (0 = off).
func (s *Session) staleTurns() int {
	switch n := s.cfg.StaleToolResultTurns; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultStaleToolResultTurns
	default:
		return n
	}
}

// viewMessagesLocked converts history to request messages, sending tool
// results older than staleTurns model turns as one-line summaries
// (seed 001 SummarizeStaleToolResults). It is a view only: history, the
// journal and events keep the full results. s.mu must be held.
func (s *Session) viewMessagesLocked() []llm.Message {
	age := s.staleTurns()
	if age == 0 {
		return historyMessages(s.history)
	}
	msgs := make([]llm.Message, 0, len(s.history))
	later := 0 // assistant turns after the current position
	stale := make([]bool, len(s.history))
	for i := len(s.history) - 1; i >= 0; i-- {
		switch s.history[i].(type) {
		case *AssistantTurn:
			later++
		case *ToolResultsTurn:
			stale[i] = later >= age
		}
	}
	var calls []llm.ToolCall // of the latest assistant turn
	for i, t := range s.history {
		if a, ok := t.(*AssistantTurn); ok {
			calls = a.ToolCalls
		}
		r, ok := t.(*ToolResultsTurn)
		if !ok || !stale[i] {
			msgs = append(msgs, t.messages()...)
			continue
		}
		summarized := &ToolResultsTurn{Results: make([]llm.ToolResult, len(r.Results)), Timestamp: r.Timestamp}
		for j, res := range r.Results {
			if len(res.Content) >= staleMinChars || len(res.Images) > 0 {
				res.Content = SummarizeToolResult(res.Content, argumentPath(callArguments(calls, res.CallID)))
				res.Images = nil
			}
			summarized.Results[j] = res
		}
		msgs = append(msgs, summarized.messages()...)
	}
	return msgs
}

// callArguments returns the arguments of the call with id among calls, or
// nil. A turn has few calls: a scan costs less than a map per turn on every
// request.
func callArguments(calls []llm.ToolCall, id string) json.RawMessage {
	for _, c := range calls {
		if c.ID == id {
			return c.Arguments
		}
	}
	return nil
}

// SummarizeToolResult is the one-line summary of a stale tool result,
// e.g. "[Summary: Returned 4500 bytes (120 lines) of Go source code]". The
// content type comes from the file path the call named, if any, or from
// patterns in the content.
func SummarizeToolResult(content, filePath string) string {
	kind := ContentTypeFromPath(filePath)
	if kind == "" {
		kind = InferContentType(content)
	}
	lines := strings.Count(content, "\n")
	if content != "" && !strings.HasSuffix(content, "\n") {
		lines++
	}
	return fmt.Sprintf("[Summary: Returned %d bytes (%d lines) of %s]", len(content), lines, kind)
}

// argumentPath is the file path named by tool arguments (file_path or
// path), or "".
func argumentPath(args json.RawMessage) string {
	var a struct {
		FilePath string `json:"file_path"`
		Path     string `json:"path"`
	}
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	if a.FilePath != "" {
		return a.FilePath
	}
	return a.Path
}

var contentTypes = map[string]string{
	".go": "Go source code", ".py": "Python source code", ".js": "JavaScript source code",
	".ts": "TypeScript source code", ".tsx": "TypeScript source code", ".jsx": "JavaScript source code",
	".rs": "Rust source code", ".java": "Java source code", ".c": "C source code", ".h": "C source code",
	".cc": "C++ source code", ".cpp": "C++ source code", ".rb": "Ruby source code", ".sh": "shell script",
	".json": "JSON", ".yaml": "YAML", ".yml": "YAML", ".toml": "TOML", ".md": "Markdown",
	".html": "HTML", ".css": "CSS", ".sql": "SQL", ".xml": "XML", ".txt": "text",
}

// ContentTypeFromPath names the content type of a file by its extension
// ("" when unknown).
func ContentTypeFromPath(p string) string {
	if p == "" {
		return ""
	}
	return contentTypes[strings.ToLower(path.Ext(p))]
}

// InferContentType guesses the content type of tool output from patterns:
// Go, Python, JSON, Markdown, diffs, else "text".
func InferContentType(content string) string {
	trimmed := strings.TrimSpace(content)
	has := func(prefixes ...string) bool {
		for _, line := range strings.Split(content, "\n") {
			// read_file numbers lines ("  12\t..."); look past the number.
			if i := strings.IndexByte(line, '\t'); i >= 0 && strings.TrimSpace(line[:i]) != "" &&
				strings.Trim(strings.TrimSpace(line[:i]), "0123456789") == "" {
				line = line[i+1:]
			}
			for _, p := range prefixes {
				if strings.HasPrefix(line, p) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case (strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "[")) && json.Valid([]byte(trimmed)):
		return "JSON"
	case has("package ") && has("func ", "import ", "type "):
		return "Go source code"
	case has("def ", "import ", "from ", "class ") && !has("package "):
		return "Python source code"
	case has("diff --git", "--- a/", "@@ "):
		return "diff"
	case has("# ", "## "):
		return "Markdown"
	}
	return "text"
}
