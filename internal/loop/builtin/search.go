package builtin

import (
	"context"
	"fmt"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Grep returns the grep tool. The Anthropic variant adds output_mode
// (content, files_with_matches, count), as Claude Code's Grep does.
func Grep(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Finds lines matching a regular expression in files under a path, returning \"path:line:text\" for each match " +
			"(at most max_results, default 100). Use glob_filter to restrict the files searched (e.g. \"*.rs\").",
		Anthropic: "A powerful search tool built on ripgrep\n\n" +
			"Usage:\n" +
			"- ALWAYS use grep for search tasks. NEVER invoke `grep` or `rg` as a shell command.\n" +
			"- Supports full regex syntax (e.g., \"log.*Error\", \"function\\\\s+\\\\w+\")\n" +
			"- Filter files with the glob_filter parameter (e.g., \"*.js\", \"**/*.tsx\")\n" +
			"- Output modes: \"content\" shows matching lines (default), \"files_with_matches\" shows only file paths, \"count\" shows match counts\n" +
			"- Pattern syntax: literal braces need escaping (use `interface\\\\{\\\\}` to find `interface{}` in Go code)",
		Gemini: "Searches for a regular expression pattern within the content of files in a specified directory (or the working directory). " +
			"Can filter files by a glob pattern. Returns the lines containing matches, along with their file paths and line numbers.",
	})
	props := []namedProp{
		p("pattern", "string", pick(v, map[Variant]string{
			OpenAI:    "Regular expression pattern to search for.",
			Anthropic: "The regular expression pattern to search for in file contents",
			Gemini:    "The regular expression (regex) pattern to search for within file contents (e.g., 'function\\\\s+myFunction', 'import\\\\s+\\\\{.*\\\\}\\\\s+from\\\\s+.*').",
		})),
		p("path", "string", pick(v, map[Variant]string{
			OpenAI:    "Directory or file to search. Defaults to the working directory.",
			Anthropic: "File or directory to search in. Defaults to the current working directory.",
			Gemini:    "Optional: the path to the directory (or file) to search within, absolute or relative to the working directory. Defaults to the working directory.",
		})),
		p("glob_filter", "string", pick(v, map[Variant]string{
			OpenAI:    "Optional glob that limits which files are searched (e.g. \"*.rs\" or \"src/**/*.go\").",
			Anthropic: "Glob pattern to filter files (e.g. \"*.js\", \"*.{ts,tsx}\")",
			Gemini:    "Optional: a glob pattern to filter which files are searched (e.g., '*.js', 'src/**/*.{ts,tsx}').",
		})),
		p("case_insensitive", "boolean", pick(v, map[Variant]string{
			OpenAI:    "Match case-insensitively (default false).",
			Anthropic: "Case insensitive search (default false)",
			Gemini:    "Optional: whether the search is case-insensitive (default false).",
		})),
		namedProp{"max_results", prop{Type: "integer", Minimum: intMin(1), Description: pick(v, map[Variant]string{
			OpenAI:    "Maximum number of matches to return (defaults to 100).",
			Anthropic: "Limit output to the first N matches (default 100)",
			Gemini:    "Optional: maximum number of matching lines to return (default 100).",
		})}},
	}
	if v == Anthropic {
		props = append(props, namedProp{"output_mode", prop{Type: "string",
			Enum:        []string{"content", "files_with_matches", "count"},
			Description: "Output mode: \"content\" shows matching lines (default), \"files_with_matches\" shows file paths, \"count\" shows match counts per file"}})
	}
	return tool.Registered{
		Definition: tool.Definition{Name: "grep", Description: desc, Parameters: objectSchema([]string{"pattern"}, props...)},
		Executor:   grep,
	}
}

type grepArgs struct {
	Pattern         string   `json:"pattern"`
	Path            string   `json:"path"`
	GlobFilter      string   `json:"glob_filter"`
	CaseInsensitive flexBool `json:"case_insensitive"`
	MaxResults      flexInt  `json:"max_results"`
	OutputMode      string   `json:"output_mode"`
}

func grep(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a grepArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if a.Pattern == "" {
		return errorResult("Error: the \"pattern\" parameter is required and must not be empty.")
	}
	dir := a.Path
	if strings.TrimSpace(dir) == "" {
		dir = "."
	}
	max := a.MaxResults.v
	if max < 0 {
		return errorResult("Error: max_results must be 1 or greater (got %d).", max)
	}
	if max == 0 {
		max = DefaultMaxResults
	}
	mode := a.OutputMode
	switch mode {
	case "", "content", "files_with_matches", "count":
	default:
		return errorResult("Error: output_mode must be \"content\", \"files_with_matches\" or \"count\" (got %q).", mode)
	}
	res, err := inv.Env.Grep(ctx, a.Pattern, dir, tool.GrepOptions{
		GlobFilter: a.GlobFilter, CaseInsensitive: bool(a.CaseInsensitive), MaxResults: max,
	})
	if err != nil {
		return envFailure(ctx, inv, "search", dir, err)
	}
	if len(res.Matches) == 0 {
		msg := fmt.Sprintf("No matches found for pattern %q in %s", a.Pattern, displayDir(dir))
		if a.GlobFilter != "" {
			msg += fmt.Sprintf(" (files matching %q)", a.GlobFilter)
		}
		return tool.Result{Output: msg + "."}, nil
	}
	var b strings.Builder
	switch mode {
	case "files_with_matches":
		seen := map[string]bool{}
		for _, m := range res.Matches {
			if !seen[m.Path] {
				seen[m.Path] = true
				b.WriteString(m.Path + "\n")
			}
		}
	case "count":
		counts := map[string]int{}
		var order []string
		for _, m := range res.Matches {
			if counts[m.Path] == 0 {
				order = append(order, m.Path)
			}
			counts[m.Path]++
		}
		for _, p := range order {
			fmt.Fprintf(&b, "%s:%d\n", p, counts[p])
		}
	default:
		for _, m := range res.Matches {
			fmt.Fprintf(&b, "%s:%d:%s\n", m.Path, m.Line, strings.TrimSuffix(m.Text, "\r"))
		}
	}
	if res.Truncated {
		fmt.Fprintf(&b, "\n(Results limited to %d matches; there are more. Narrow the pattern, path or glob_filter, or raise max_results.)", max)
	}
	return tool.Result{Output: strings.TrimSuffix(b.String(), "\n")}, nil
}

// Glob returns the glob tool: files matching a pattern, newest first.
func Glob(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Finds files whose path matches a glob pattern (e.g. \"**/*.go\") under a directory, sorted by modification time, newest first.",
		Anthropic: "- Fast file pattern matching tool that works with any codebase size\n" +
			"- Supports glob patterns like \"**/*.js\" or \"src/**/*.ts\"\n" +
			"- Returns matching file paths sorted by modification time (newest first)\n" +
			"- Use this tool when you need to find files by name patterns",
		Gemini: "Efficiently finds files matching specific glob patterns (e.g., `src/**/*.ts`, `**/*.md`), returning paths sorted by modification time (newest first). " +
			"Ideal for quickly locating files based on their name or path structure.",
	})
	schema := objectSchema([]string{"pattern"},
		p("pattern", "string", pick(v, map[Variant]string{
			OpenAI:    "Glob pattern relative to path, e.g. \"**/*.ts\".",
			Anthropic: "The glob pattern to match files against",
			Gemini:    "The glob pattern to match against (e.g., '**/*.py', 'docs/*.md').",
		})),
		p("path", "string", pick(v, map[Variant]string{
			OpenAI:    "Base directory to search. Defaults to the working directory.",
			Anthropic: "The directory to search in. If not specified, the current working directory will be used.",
			Gemini:    "Optional: the directory to search within (absolute, or relative to the working directory). Defaults to the working directory.",
		})),
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "glob", Description: desc, Parameters: schema},
		Executor:   glob,
	}
}

type globArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
}

func glob(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a globArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if strings.TrimSpace(a.Pattern) == "" {
		return errorResult("Error: the \"pattern\" parameter is required and must not be empty.")
	}
	dir := a.Path
	if strings.TrimSpace(dir) == "" {
		dir = "."
	}
	files, err := inv.Env.Glob(ctx, a.Pattern, dir)
	if err != nil {
		return envFailure(ctx, inv, "search", dir, err)
	}
	if len(files) == 0 {
		return tool.Result{Output: fmt.Sprintf("No files found matching %q in %s.", a.Pattern, displayDir(dir))}, nil
	}
	return tool.Result{Output: strings.Join(files, "\n")}, nil
}
