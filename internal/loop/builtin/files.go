package builtin

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ReadFile returns the read_file tool: line-numbered text ("NNN | content"),
// 1-based offset, limit (default 2000), images as Result.Images, binary
// files refused.
func ReadFile(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Reads a local file with 1-indexed line numbers, supporting slice reads via offset and limit. " +
			"Returns lines as \"NNN | content\". Image files (PNG, JPEG, GIF, WebP) are returned as images.",
		Anthropic: "Reads a file from the local filesystem. You can access any file directly by using this tool.\n" +
			"Assume this tool is able to read all files in the workspace. If the User provides a path to a file assume that path is valid. " +
			"It is okay to read a file that does not exist; an error will be returned.\n\n" +
			"Usage:\n" +
			"- The file_path parameter should be an absolute path; paths relative to the working directory are also accepted\n" +
			"- By default, it reads up to 2000 lines starting from the beginning of the file\n" +
			"- You can optionally specify a line offset and limit (especially handy for long files), but it's recommended to read the whole file by not providing these parameters\n" +
			"- Results are returned with line numbers starting at 1, in the format \"NNN | content\"\n" +
			"- This tool allows you to read images (PNG, JPEG, GIF, WebP). When reading an image file the contents are presented visually\n" +
			"- Binary files that are not images cannot be read; use the shell tool to inspect them\n" +
			"- It is always better to speculatively read multiple files as a batch that are potentially useful",
		Gemini: "Reads and returns the content of a specified file. If the file is large, use the 'offset' and 'limit' parameters to read it in parts. " +
			"Handles text files (returned with line numbers as \"NNN | content\") and images (PNG, JPEG, GIF, WEBP). Other binary files are refused.",
	})
	pathDesc := pick(v, map[Variant]string{
		OpenAI:    "Absolute path to the file (or a path relative to the working directory).",
		Anthropic: "The absolute path to the file to read",
		Gemini:    "The path to the file to read (e.g., '/home/user/project/file.txt' or 'src/main.go', relative to the working directory).",
	})
	schema := objectSchema([]string{"file_path"},
		p("file_path", "string", pathDesc),
		p("offset", "integer", pick(v, map[Variant]string{
			OpenAI:    "The line number to start reading from. Must be 1 or greater.",
			Anthropic: "The line number to start reading from. Only provide if the file is too large to read at once",
			Gemini:    "Optional: the 1-based line number to start reading from. Use with 'limit' to page through large files.",
		})),
		p("limit", "integer", pick(v, map[Variant]string{
			OpenAI:    "The maximum number of lines to return (default 2000, at most 10000).",
			Anthropic: "The number of lines to read (at most 10000). Only provide if the file is too large to read at once.",
			Gemini:    "Optional: the maximum number of lines to read (default 2000, at most 10000).",
		})),
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "read_file", Description: desc, Parameters: schema},
		Executor:   readFile,
	}
}

type readArgs struct {
	FilePath string  `json:"file_path"`
	Offset   flexInt `json:"offset"`
	Limit    flexInt `json:"limit"`
}

func readFile(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a readArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if msg, ok := requirePath("file_path", a.FilePath); !ok {
		return errorResult("%s", msg)
	}
	offset, limit := a.Offset.v, a.Limit.v
	if offset < 0 {
		return errorResult("Error: offset must be 1 or greater (got %d).", offset)
	}
	if limit < 0 {
		return errorResult("Error: limit must be 1 or greater (got %d).", limit)
	}
	if offset == 0 {
		offset = 1
	}
	if !a.Limit.set || limit == 0 {
		limit = DefaultReadLimit
	}
	if limit > MaxReadLimit {
		limit = MaxReadLimit
	}
	fc, err := inv.Env.ReadFile(ctx, a.FilePath, tool.ReadOptions{Offset: offset, Limit: limit})
	if err != nil {
		return envFailure(ctx, inv, "read", a.FilePath, err)
	}
	if fc.MediaType != "" {
		return tool.Result{
			Output: fmt.Sprintf("Image file %s (%s, %d bytes).", a.FilePath, fc.MediaType, fc.Size),
			Images: []llm.Image{{MediaType: fc.MediaType, Data: fc.Content}},
		}, nil
	}
	if fc.Binary {
		return errorResult("Error: %s is a binary file (%d bytes) and cannot be read as text. Use the shell tool (e.g. `file`, `xxd | head`) to inspect it.", a.FilePath, fc.Size)
	}
	if fc.TotalLines == 0 {
		record(inv, a.FilePath, fc.Content)
		return tool.Result{Output: fmt.Sprintf("(%s is empty)", a.FilePath)}, nil
	}
	if offset > fc.TotalLines {
		return errorResult("Error: offset %d is beyond the end of %s, which has %d lines.", offset, a.FilePath, fc.TotalLines)
	}
	content, err := trackRead(ctx, inv, a.FilePath, offset, limit, fc)
	if err != nil {
		return envFailure(ctx, inv, "read", a.FilePath, err)
	}
	out, last := numberLines(string(content), offset)
	if last < fc.TotalLines {
		out += fmt.Sprintf("\n\n(Showing lines %d-%d of %d. Use offset=%d to read more.)", offset, last, fc.TotalLines, last+1)
	}
	return tool.Result{Output: out}, nil
}

// numberLines renders content as "NNN | line" lines starting at first and
// returns the number of the last line.
func numberLines(content string, first int) (string, int) {
	content = strings.TrimSuffix(content, "\n")
	lines := strings.Split(content, "\n")
	last := first + len(lines) - 1
	width := len(strconv.Itoa(last))
	var b strings.Builder
	b.Grow(len(content) + len(lines)*(width+4))
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		n := strconv.Itoa(first + i)
		b.WriteString(strings.Repeat(" ", width-len(n)))
		b.WriteString(n)
		b.WriteString(" | ")
		b.WriteString(strings.TrimSuffix(l, "\r"))
	}
	return b.String(), last
}

// WriteFile returns the write_file tool.
func WriteFile(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Writes content to a file, creating the file and any parent directories if needed and replacing it if it exists. " +
			"Use apply_patch to edit existing files; use this to create new files.",
		Anthropic: "Writes a file to the local filesystem.\n\n" +
			"Usage:\n" +
			"- This tool will overwrite the existing file if there is one at the provided path.\n" +
			"- If this is an existing file, you MUST use the read_file tool first to read the file's contents. This tool will fail (StaleFile) if you did not read the file, or if it changed since you read it.\n" +
			"- ALWAYS prefer editing existing files in the codebase. NEVER write new files unless explicitly required.\n" +
			"- NEVER proactively create documentation files (*.md) or README files. Only create documentation files if explicitly requested by the User.",
		Gemini: "Writes content to a specified file in the local filesystem. Creates the file and parent directories if needed; overwrites an existing file.",
	})
	schema := objectSchema([]string{"file_path", "content"},
		p("file_path", "string", pick(v, map[Variant]string{
			OpenAI:    "Absolute path to the file (or a path relative to the working directory).",
			Anthropic: "The absolute path to the file to write (must be absolute, not relative)",
			Gemini:    "The path to the file to write to (absolute, or relative to the working directory).",
		})),
		p("content", "string", pick(v, map[Variant]string{
			OpenAI:    "The full content to write.",
			Anthropic: "The content to write to the file",
			Gemini:    "The content to write to the file.",
		})),
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "write_file", Description: desc, Parameters: schema},
		Executor:   func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) { return writeFile(ctx, inv, v) },
	}
}

type writeArgs struct {
	FilePath string  `json:"file_path"`
	Content  *string `json:"content"`
}

func writeFile(ctx context.Context, inv *tool.Invocation, v Variant) (tool.Result, error) {
	if len(inv.Arguments) > MaxWriteBytes+64<<10 {
		return errorResult("Error: the arguments are %d bytes; write_file accepts at most %d bytes of content. Write the file in parts (write then edit) or generate it with a command.", len(inv.Arguments), MaxWriteBytes)
	}
	var a writeArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if msg, ok := requirePath("file_path", a.FilePath); !ok {
		return errorResult("%s", msg)
	}
	if a.Content == nil {
		return errorResult("Error: the \"content\" parameter is required (use an empty string for an empty file).")
	}
	if len(*a.Content) > MaxWriteBytes {
		return errorResult("Error: content is %d bytes; write_file accepts at most %d bytes. Write the file in parts or generate it with a command.", len(*a.Content), MaxWriteBytes)
	}
	unlock, err := lockPaths(ctx, inv, a.FilePath)
	if err != nil {
		return tool.Result{}, err
	}
	defer unlock()
	existed, err := inv.Env.FileExists(ctx, a.FilePath)
	if err != nil {
		return envFailure(ctx, inv, "write", a.FilePath, err)
	}
	content := []byte(*a.Content)
	if existed && inv.Files != nil && requiresRead(v) {
		// Overwriting needs a current read, as for edits.
		fc, err := inv.Env.ReadFile(ctx, a.FilePath, tool.ReadOptions{})
		if err != nil {
			return envFailure(ctx, inv, "write", a.FilePath, err)
		}
		if err := checkFresh(inv, v, a.FilePath, fc.Content); err != nil {
			return errorResult("Error: %v. No change was made.", err)
		}
		err = tool.WriteFileIf(ctx, inv.Env, a.FilePath, content, sha256Hex(fc.Content))
		if isConflict(err) && ctx.Err() == nil {
			return errorResult("Error: %s", conflictMessage(a.FilePath))
		}
		if err != nil {
			return envFailure(ctx, inv, "write", a.FilePath, err)
		}
	} else if err := inv.Env.WriteFile(ctx, a.FilePath, content); err != nil {
		return envFailure(ctx, inv, "write", a.FilePath, err)
	}
	record(inv, a.FilePath, content)
	verb := "Created"
	if existed {
		verb = "Overwrote"
	}
	return tool.Result{Output: fmt.Sprintf("%s %s: wrote %d bytes.", verb, a.FilePath, len(*a.Content))}, nil
}

// ListDir returns the list_dir tool (gemini-cli's list_directory with a
// depth option).
func ListDir(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI:    "Lists entries in a local directory, recursing down to depth levels (1 = direct children). Directories end with '/'; files show their size.",
		Anthropic: "Lists files and directories in a given path, down to the given depth (1 = direct children). Prefer glob and grep when you know what you are looking for.",
		Gemini:    "Lists the names of files and subdirectories within a specified directory path, down to the given depth (1 = direct children). Directories are marked with '/'.",
	})
	schema := objectSchema(nil,
		p("path", "string", pick(v, map[Variant]string{
			OpenAI:    "Path to the directory to list (default: the working directory).",
			Anthropic: "The path to the directory to list (default: the working directory)",
			Gemini:    "The path to the directory to list (absolute, or relative to the working directory; default: the working directory).",
		})),
		namedProp{"depth", prop{Type: "integer", Minimum: intMin(1), Description: pick(v, map[Variant]string{
			OpenAI: "The maximum directory depth to traverse (default 1, at most 10).",
			Gemini: "Optional: how many levels to list (default 1 = direct children only, at most 10).",
		})}},
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "list_dir", Description: desc, Parameters: schema},
		Executor:   listDir,
	}
}

type listArgs struct {
	Path  string  `json:"path"`
	Depth flexInt `json:"depth"`
}

func listDir(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a listArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	dir := a.Path
	if strings.TrimSpace(dir) == "" {
		dir = "."
	}
	depth := a.Depth.v
	if depth < 0 {
		return errorResult("Error: depth must be 1 or greater (got %d).", depth)
	}
	if depth == 0 {
		depth = 1
	}
	if depth > MaxListDepth {
		depth = MaxListDepth
	}
	entries, err := inv.Env.ListDirectory(ctx, dir, depth)
	if err != nil {
		return envFailure(ctx, inv, "list", dir, err)
	}
	if len(entries) == 0 {
		return tool.Result{Output: fmt.Sprintf("Directory %s is empty.", displayDir(dir))}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Directory listing for %s (%d entries):\n", displayDir(dir), len(entries))
	for _, e := range entries {
		if e.IsDir {
			fmt.Fprintf(&b, "%s/\n", e.Name)
		} else {
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.Name, e.Size)
		}
	}
	return tool.Result{Output: strings.TrimSuffix(b.String(), "\n")}, nil
}

// ReadManyFiles returns the read_many_files tool (gemini-cli): several paths
// or glob patterns at once, concatenated with "--- path ---" headers.
func ReadManyFiles(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		Gemini: "Reads content from multiple files specified by paths or glob patterns within the working directory. " +
			"Text files are concatenated, each preceded by a separator line '--- {filePath} ---'. " +
			"Images (PNG, JPEG, GIF, WEBP) are returned as images; other binary files are skipped. " +
			"Use this when you need an overview of several files at once, e.g. all files of a module or all configuration files.",
		OpenAI: "Reads several files at once. Each entry of paths is a file path or a glob pattern (e.g. \"src/**/*.go\"); " +
			"file contents are concatenated with \"--- path ---\" headers.",
	})
	schema := objectSchema([]string{"paths"},
		namedProp{"paths", prop{Type: "array", Items: &prop{Type: "string"}, MinItems: intMin(1),
			Description: pick(v, map[Variant]string{
				Gemini: "Required. An array of file paths or glob patterns relative to the working directory, e.g. ['src/**/*.ts'] or ['README.md', 'docs/*.md'].",
				OpenAI: "File paths or glob patterns relative to the working directory.",
			})}},
		namedProp{"exclude", prop{Type: "array", Items: &prop{Type: "string"},
			Description: "Optional: glob patterns of files to skip, e.g. ['**/*.log']."}},
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "read_many_files", Description: desc, Parameters: schema},
		Executor:   readManyFiles,
	}
}

type manyArgs struct {
	Paths   []string `json:"paths"`
	Exclude []string `json:"exclude"`
}

func isGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

func readManyFiles(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a manyArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if len(a.Paths) == 0 {
		return errorResult("Error: \"paths\" must list at least one file path or glob pattern.")
	}
	var files, notes []string
	seen := map[string]bool{}
	add := func(f string) {
		if !seen[f] {
			seen[f] = true
			files = append(files, f)
		}
	}
	for _, raw := range a.Paths {
		pth := strings.TrimSpace(raw)
		if pth == "" {
			continue
		}
		if isGlob(pth) {
			matches, err := inv.Env.Glob(ctx, pth, ".")
			if err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return tool.Result{}, cerr
				}
				notes = append(notes, fmt.Sprintf("%s: %v", pth, err))
				continue
			}
			if len(matches) == 0 {
				notes = append(notes, fmt.Sprintf("%s: no files matched", pth))
			}
			for _, m := range matches {
				add(m)
			}
			continue
		}
		add(pth)
	}
	var b strings.Builder
	var images []llm.Image
	var total int64
	read := 0
	for i, f := range files {
		if excluded(f, a.Exclude) {
			continue
		}
		if read >= MaxManyFiles {
			notes = append(notes, fmt.Sprintf("stopped after %d files (%d more not read); request fewer files", MaxManyFiles, len(files)-i))
			break
		}
		fc, err := inv.Env.ReadFile(ctx, f, tool.ReadOptions{})
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return tool.Result{}, cerr
			}
			notes = append(notes, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		if total+fc.Size > MaxManyBytes {
			notes = append(notes, fmt.Sprintf("%s: skipped, the total size would exceed %d bytes; read it separately", f, MaxManyBytes))
			continue
		}
		switch {
		case fc.MediaType != "":
			images = append(images, llm.Image{MediaType: fc.MediaType, Data: fc.Content})
			fmt.Fprintf(&b, "--- %s ---\n[image %s, %d bytes, attached]\n\n", f, fc.MediaType, fc.Size)
		case fc.Binary:
			notes = append(notes, fmt.Sprintf("%s: skipped, binary file", f))
			continue
		default:
			record(inv, f, fc.Content)
			fmt.Fprintf(&b, "--- %s ---\n%s", f, fc.Content)
			if len(fc.Content) > 0 && fc.Content[len(fc.Content)-1] != '\n' {
				b.WriteByte('\n')
			}
			b.WriteByte('\n')
		}
		total += fc.Size
		read++
	}
	if read == 0 {
		msg := "Error: no files were read."
		if len(notes) > 0 {
			msg += "\n" + strings.Join(notes, "\n")
		}
		return errorResult("%s", msg)
	}
	b.WriteString("--- End of content ---")
	if len(notes) > 0 {
		b.WriteString("\n\nNot read:\n- " + strings.Join(notes, "\n- "))
	}
	return tool.Result{Output: b.String(), Images: images}, nil
}

// excluded reports whether f matches one of the exclude globs (by whole
// relative path or by base name).
func excluded(f string, patterns []string) bool {
	for _, pat := range patterns {
		if matchGlob(pat, f) {
			return true
		}
	}
	return false
}

// trackRead records the model's view of a text file it just read (fc, lines
// from offset) and returns the lines to show. When fc holds only part of the
// file, the whole file (up to MaxTrackBytes) is read once more to hash it,
// and the lines shown are taken from that same content, so the recorded
// hash is exactly of the file the shown lines came from.
func trackRead(ctx context.Context, inv *tool.Invocation, p string, offset, limit int, fc *tool.FileContent) ([]byte, error) {
	if inv.Files == nil {
		return fc.Content, nil
	}
	if offset == 1 && int64(len(fc.Content)) == fc.Size {
		record(inv, p, fc.Content)
		return fc.Content, nil
	}
	if fc.Size > MaxTrackBytes {
		return fc.Content, nil // too large to edit: nothing to protect
	}
	full, err := inv.Env.ReadFile(ctx, p, tool.ReadOptions{})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		// Above the environment's whole-file cap: not editable either, so
		// there is nothing to protect; show the range already read.
		return fc.Content, nil
	}
	if full.Binary {
		return fc.Content, nil
	}
	record(inv, p, full.Content)
	return sliceLines(full.Content, offset, limit), nil
}

// sliceLines returns lines [offset, offset+limit) (1-based) of b verbatim.
func sliceLines(b []byte, offset, limit int) []byte {
	start := 0
	for line := 1; line < offset; line++ {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 {
			return nil
		}
		start += i + 1
	}
	end := start
	for n := 0; n < limit && end < len(b); n++ {
		i := bytes.IndexByte(b[end:], '\n')
		if i < 0 {
			end = len(b)
			break
		}
		end += i + 1
	}
	return b[start:end]
}
