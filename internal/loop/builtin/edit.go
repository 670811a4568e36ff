package builtin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agent-operator/agent-operator/internal/loop/patch"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// EditFile returns the edit_file tool: exact old_string/new_string
// replacement with a uniqueness check, replace_all, and a fallback that
// matches after normalising whitespace and Unicode punctuation (reported in
// the output). An empty old_string creates a new file.
func EditFile(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Replaces an exact string in a file. old_string must match the file exactly (including indentation) and be unique unless replace_all is set; " +
			"include enough surrounding lines to make it unique. An empty old_string creates a new file with new_string as its content. " +
			"If the file changed since you last read it, the edit is refused (StaleFile): read it again.",
		Anthropic: "Performs exact string replacements in files.\n\n" +
			"Usage:\n" +
			"- You must use your read_file tool at least once in the conversation before editing. This tool will error if you attempt an edit without reading the file, " +
			"or if the file changed since you last read it (StaleFile): read it again, then edit.\n" +
			"- When editing text from read_file output, ensure you preserve the exact indentation (tabs/spaces) as it appears AFTER the line number prefix. " +
			"The line number prefix format is: line number + \" | \". Everything after that is the actual file content to match. Never include any part of the line number prefix in the old_string or new_string.\n" +
			"- ALWAYS prefer editing existing files in the codebase. NEVER write new files unless explicitly required.\n" +
			"- The edit will FAIL if old_string is not unique in the file. Either provide a larger string with more surrounding context to make it unique or use replace_all to change every instance of old_string.\n" +
			"- Use replace_all for replacing and renaming strings across the file. This parameter is useful if you want to rename a variable for instance.",
		Gemini: "Replaces text within a file. By default, replaces a single occurrence; set replace_all to replace every occurrence. " +
			"This tool requires providing significant context around the change to ensure precise targeting. Always use the read_file tool to examine the file's current content before attempting a text replacement.\n\n" +
			"Expectations for required parameters:\n" +
			"1. old_string MUST be the exact literal text to replace (including all whitespace, indentation, newlines, and surrounding code etc.).\n" +
			"2. new_string MUST be the exact literal text to replace old_string with. Ensure the resulting code is correct and idiomatic.\n" +
			"3. NEVER escape old_string or new_string, that would break the exact literal text requirement.\n" +
			"Important: If old_string does not identify a single location, the tool fails. Include at least 3 lines of context BEFORE and AFTER the target text.\n" +
			"To create a new file, use an empty old_string and the file content as new_string.\n" +
			"If the file changed since you last read it (by a command, another agent or the user), the edit is refused with a StaleFile error: read it again.",
	})
	schema := objectSchema([]string{"file_path", "old_string", "new_string"},
		p("file_path", "string", pick(v, map[Variant]string{
			OpenAI:    "Absolute path to the file (or a path relative to the working directory).",
			Anthropic: "The absolute path to the file to modify",
			Gemini:    "The path to the file to modify (absolute, or relative to the working directory).",
		})),
		p("old_string", "string", pick(v, map[Variant]string{
			OpenAI:    "The exact text to replace.",
			Anthropic: "The text to replace",
			Gemini:    "The exact literal text to replace, preferably unescaped. Include at least 3 lines of context before and after the target text, matching whitespace and indentation precisely.",
		})),
		p("new_string", "string", pick(v, map[Variant]string{
			OpenAI:    "The replacement text.",
			Anthropic: "The text to replace it with (must be different from old_string)",
			Gemini:    "The exact literal text to replace old_string with, preferably unescaped.",
		})),
		p("replace_all", "boolean", pick(v, map[Variant]string{
			OpenAI:    "Replace every occurrence of old_string (default false).",
			Anthropic: "Replace all occurences of old_string (default false)",
			Gemini:    "Optional: replace every occurrence of old_string instead of requiring a unique match (default false).",
		})),
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "edit_file", Description: desc, Parameters: schema},
		Executor:   func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) { return editFile(ctx, inv, v) },
	}
}

type editArgs struct {
	FilePath   string   `json:"file_path"`
	OldString  *string  `json:"old_string"`
	NewString  *string  `json:"new_string"`
	ReplaceAll flexBool `json:"replace_all"`
}

func editFile(ctx context.Context, inv *tool.Invocation, v Variant) (tool.Result, error) {
	var a editArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if msg, ok := requirePath("file_path", a.FilePath); !ok {
		return errorResult("%s", msg)
	}
	if a.OldString == nil || a.NewString == nil {
		return errorResult("Error: both \"old_string\" and \"new_string\" are required.")
	}
	oldS, newS := *a.OldString, *a.NewString
	if len(oldS) > MaxWriteBytes || len(newS) > MaxWriteBytes {
		return errorResult("Error: old_string and new_string may be at most %d bytes each.", MaxWriteBytes)
	}
	if oldS == newS {
		return errorResult("Error: old_string and new_string are identical; there is nothing to change.")
	}
	unlock, err := lockPaths(ctx, inv, a.FilePath)
	if err != nil {
		return tool.Result{}, err
	}
	defer unlock()
	exists, err := inv.Env.FileExists(ctx, a.FilePath)
	if err != nil {
		return envFailure(ctx, inv, "edit", a.FilePath, err)
	}
	if oldS == "" {
		return createByEdit(ctx, inv, v, a.FilePath, newS, exists)
	}
	if !exists {
		return errorResult("Error: cannot edit %s: it does not exist. To create it, use an empty old_string (or write_file).", a.FilePath)
	}
	fc, err := inv.Env.ReadFile(ctx, a.FilePath, tool.ReadOptions{})
	if err != nil {
		return envFailure(ctx, inv, "edit", a.FilePath, err)
	}
	if fc.Binary {
		return errorResult("Error: cannot edit %s: it is a binary file.", a.FilePath)
	}
	if err := checkFresh(inv, v, a.FilePath, fc.Content); err != nil {
		return errorResult("Error: %v. No change was made.", err)
	}
	content := string(fc.Content)

	// A CRLF file edited with LF strings: match and write CRLF.
	if strings.Contains(content, "\r\n") && !strings.Contains(oldS, "\r") && strings.Contains(oldS, "\n") &&
		!strings.Contains(content, oldS) {
		oldS = strings.ReplaceAll(oldS, "\n", "\r\n")
		newS = strings.ReplaceAll(strings.ReplaceAll(newS, "\r\n", "\n"), "\n", "\r\n")
	}

	spans, level, err := findSpans(ctx, content, oldS)
	var many errTooManySpans
	switch {
	case errors.As(err, &many):
		return errorResult("Error: %v. Use a longer old_string, or a command (e.g. sed) for mass replacements.", err)
	case err != nil:
		if cerr := ctx.Err(); cerr != nil {
			return tool.Result{}, cerr
		}
		return errorResult("Error: cannot edit %s: %v", a.FilePath, err)
	}
	if len(spans) == 0 {
		return errorResult("Error: old_string was not found in %s (not even after normalising whitespace and Unicode punctuation). "+
			"Read the file again and copy the text exactly, including indentation.", a.FilePath)
	}
	if len(spans) > 1 && !bool(a.ReplaceAll) {
		return errorResult("Error: old_string matches %d locations in %s (first at lines %s). "+
			"Provide more surrounding context to make it unique, or set replace_all to true to replace every occurrence.",
			len(spans), a.FilePath, lineList(content, spans, 5))
	}
	if size := resultSize(content, spans, newS); size > MaxWriteBytes {
		return errorResult("Error: the edit would make %s %d bytes (%d replacements); edit_file writes at most %d bytes. "+
			"Replace fewer occurrences per call or use a command.", a.FilePath, size, len(spans), MaxWriteBytes)
	}
	var b strings.Builder
	b.Grow(int(resultSize(content, spans, newS)))
	pos := 0
	for _, s := range spans {
		b.WriteString(content[pos:s[0]])
		b.WriteString(newS)
		pos = s[1]
	}
	b.WriteString(content[pos:])
	result := []byte(b.String())
	if err := tool.WriteFileIf(ctx, inv.Env, a.FilePath, result, sha256Hex(fc.Content)); err != nil {
		if isConflict(err) && ctx.Err() == nil {
			return errorResult("Error: %s", conflictMessage(a.FilePath))
		}
		return envFailure(ctx, inv, "edit", a.FilePath, err)
	}
	record(inv, a.FilePath, result)
	line := strings.Count(content[:spans[0][0]], "\n") + 1
	out := fmt.Sprintf("Edited %s: replaced %d occurrence(s) (first at line %d).", a.FilePath, len(spans), line)
	switch level {
	case matchWhitespace:
		out += "\nNote: old_string did not match exactly; it matched after normalising whitespace. Check the result."
	case matchUnicode:
		out += "\nNote: old_string did not match exactly; it matched after normalising whitespace and Unicode punctuation (quotes, dashes, special spaces). Check the result."
	}
	return tool.Result{Output: out}, nil
}

func createByEdit(ctx context.Context, inv *tool.Invocation, v Variant, path, content string, exists bool) (tool.Result, error) {
	ifSHA := ""
	if exists {
		fc, err := inv.Env.ReadFile(ctx, path, tool.ReadOptions{})
		if err != nil {
			return envFailure(ctx, inv, "edit", path, err)
		}
		if fc.Size > 0 {
			return errorResult("Error: old_string is empty, which creates a new file, but %s already exists and is not empty. "+
				"Provide the text to replace in old_string.", path)
		}
		ifSHA = sha256Hex(fc.Content)
	}
	if err := tool.WriteFileIf(ctx, inv.Env, path, []byte(content), ifSHA); err != nil {
		if isConflict(err) && ctx.Err() == nil {
			return errorResult("Error: %s", conflictMessage(path))
		}
		return envFailure(ctx, inv, "edit", path, err)
	}
	record(inv, path, []byte(content))
	return tool.Result{Output: fmt.Sprintf("Created %s (%d bytes).", path, len(content))}, nil
}

type matchLevel int

const (
	matchExact matchLevel = iota
	matchWhitespace
	matchUnicode
)

// findSpans returns the non-overlapping byte ranges of content matching
// old: exactly; else line by line ignoring whitespace differences (then also
// Unicode punctuation); else, for a single-line old, as a fragment of one
// line after collapsing whitespace (then also Unicode punctuation).
func findSpans(ctx context.Context, content, old string) ([][2]int, matchLevel, error) {
	if err := ctx.Err(); err != nil {
		return nil, matchExact, fmt.Errorf("match old_string: %w", err)
	}
	if n := strings.Count(content, old); n > 0 {
		if n > maxEditSpans {
			return nil, matchExact, errTooManySpans{n: n}
		}
		spans := make([][2]int, 0, n)
		for from := 0; ; {
			i := strings.Index(content[from:], old)
			if i < 0 {
				break
			}
			spans = append(spans, [2]int{from + i, from + i + len(old)})
			from += i + len(old)
		}
		return spans, matchExact, nil
	}
	if strings.TrimSpace(old) == "" {
		return nil, matchExact, nil
	}
	for _, f := range []patch.Fuzz{patch.FuzzTrailingWhitespace, patch.FuzzWhitespace, patch.FuzzUnicode} {
		spans, err := findLineSpans(ctx, content, old, f)
		if err != nil {
			return nil, matchExact, err
		}
		if len(spans) > 0 {
			if f == patch.FuzzUnicode {
				return spans, matchUnicode, nil
			}
			return spans, matchWhitespace, nil
		}
	}
	if strings.Contains(strings.TrimSpace(old), "\n") {
		return nil, matchExact, nil
	}
	// Everything that depends only on old is computed once here, not per
	// line of content.
	plain, _ := normalizeFragment(strings.TrimSpace(old), false, false)
	spans, err := findFragmentSpans(ctx, content, plain, false)
	if err != nil || len(spans) > 0 {
		return spans, matchWhitespace, err
	}
	punct, _ := normalizeFragment(strings.TrimSpace(old), true, false)
	if punct == plain && isASCII(content) {
		// Mapping punctuation changes neither side: the pass above
		// already gave the answer.
		return nil, matchExact, nil
	}
	spans, err = findFragmentSpans(ctx, content, punct, true)
	if err != nil || len(spans) > 0 {
		return spans, matchUnicode, err
	}
	return nil, matchExact, nil
}

// matchCheckBytes is how much content the matchers scan between two checks
// of the context (also checked every ctxCheckLines lines).
const (
	matchCheckBytes = 1 << 20
	ctxCheckLines   = 4096
)

// progress decides when a matcher checks its context: every ctxCheckLines
// lines and every matchCheckBytes bytes of content.
type progress struct{ lines, bytes int }

func (p *progress) check(ctx context.Context, lineBytes int) error {
	p.lines++
	p.bytes += lineBytes
	if p.lines < ctxCheckLines && p.bytes < matchCheckBytes {
		return nil
	}
	p.lines, p.bytes = 0, 0
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("match old_string: %w", err)
	}
	return nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// maxEditSpans caps the occurrences one edit_file call replaces.
const maxEditSpans = 100_000

// errTooManySpans is an old_string occurring more often than maxEditSpans.
type errTooManySpans struct {
	n       int
	atLeast bool // n is a lower bound: matching stopped there
}

func (e errTooManySpans) Error() string {
	if e.atLeast {
		return fmt.Sprintf("old_string matches more than %d locations; edit_file replaces at most %d occurrences per call", maxEditSpans, maxEditSpans)
	}
	return fmt.Sprintf("old_string occurs %d times; edit_file replaces at most %d occurrences per call", e.n, maxEditSpans)
}

// resultSize is the size of content after replacing spans with repl.
func resultSize(content string, spans [][2]int, repl string) int64 {
	size := int64(len(content))
	for _, s := range spans {
		size += int64(len(repl)) - int64(s[1]-s[0])
	}
	return size
}

// findLineSpans matches the lines of old against whole lines of content,
// each normalised at level f. The span starts at the first non-blank byte of
// the first line unless old starts with whitespace, and ends at the last
// non-blank byte of the last line unless old ends with whitespace (a final
// newline of old includes the line's newline).
//
// Content is streamed line by line through patch.LineMatcher over the
// lines of old (a content line that is no line of old resets it), so
// the cost is linear in the size of content and the extra memory is bounded
// by old and the longest line, however many lines content has.
func findLineSpans(ctx context.Context, content, old string, f patch.Fuzz) ([][2]int, error) {
	o := strings.TrimSuffix(old, "\n")
	trailingNL := len(o) < len(old)
	o = strings.TrimSuffix(o, "\r")
	oldLines := strings.Split(o, "\n")
	m := len(oldLines)
	want := make([]string, m)
	minLen := -1 // the shortest normalised line of old
	for i, l := range oldLines {
		want[i] = f.Normalize(strings.TrimSuffix(l, "\r"))
		if minLen < 0 || len(want[i]) < minLen {
			minLen = len(want[i])
		}
	}
	if f == patch.FuzzUnicode {
		minLen = (minLen + 2) / 3 // an invalid byte becomes U+FFFD (3 bytes)
	}
	lm := patch.NewLineMatcher(want)
	startsBlank := oldLines[0] != strings.TrimLeftFunc(oldLines[0], unicode.IsSpace)
	last := oldLines[m-1]
	endsBlank := last != strings.TrimRightFunc(last, unicode.IsSpace)

	// starts holds the start offsets of the last m lines (a ring).
	starts := make([]int, m)
	var spans [][2]int
	var prog progress
	for pos, n := 0, 0; pos < len(content); n++ {
		// Each content line: [pos, end) without "\r\n"/"\n"; next is the
		// offset after its newline.
		nl := strings.IndexByte(content[pos:], '\n')
		next, end := len(content), len(content)
		if nl >= 0 {
			end = pos + nl
			next = end + 1
		}
		if err := prog.check(ctx, next-pos); err != nil {
			return nil, err
		}
		if end > pos && content[end-1] == '\r' && nl >= 0 {
			end--
		}
		start, text := pos, content[pos:end]
		starts[n%m] = start
		pos = next
		// Normalising never lengthens a line (but see FuzzUnicode above):
		// one shorter than every line of old cannot match.
		if len(text) < minLen {
			lm.Reset()
			continue
		}
		if !lm.Next(f.Normalize(text)) {
			continue
		}
		lm.Reset() // matches do not overlap
		if len(spans) == maxEditSpans {
			return nil, errTooManySpans{n: len(spans) + 1, atLeast: true}
		}
		s := starts[(n-m+1)%m]
		if !startsBlank {
			firstEnd := len(content)
			if i := strings.IndexByte(content[s:], '\n'); i >= 0 {
				firstEnd = s + i
			}
			first := content[s:firstEnd]
			s += len(first) - len(strings.TrimLeftFunc(first, unicode.IsSpace))
		}
		e := end
		switch {
		case trailingNL:
			e = next
		case !endsBlank:
			e = start + len(strings.TrimRightFunc(text, unicode.IsSpace))
		}
		if e < s {
			e = s
		}
		spans = append(spans, [2]int{s, e})
	}
	return spans, nil
}

// findFragmentSpans finds nOld, a single line of old_string normalised by
// normalizeFragment, inside lines of content after collapsing whitespace
// (and, with punct, mapping Unicode punctuation). Matches never cross a
// newline. A line too short to hold nOld costs O(1); a longer one is
// normalised once, and mapped back to its offsets only when it contains a
// match, so the cost is linear in content, the extra memory is bounded by
// the longest line, and ctx is checked regularly.
func findFragmentSpans(ctx context.Context, content, nOld string, punct bool) ([][2]int, error) {
	if nOld == "" {
		return nil, nil
	}
	// Normalising never lengthens text, except that with punct an invalid
	// byte becomes U+FFFD (3 bytes).
	minLine := len(nOld)
	if punct {
		minLine = (len(nOld) + 2) / 3
	}
	var spans [][2]int
	var prog progress
	for pos := 0; pos < len(content); {
		end := len(content)
		next := end
		if i := strings.IndexByte(content[pos:], '\n'); i >= 0 {
			end, next = pos+i, pos+i+1
		}
		if err := prog.check(ctx, next-pos); err != nil {
			return nil, err
		}
		line := content[pos:end]
		base := pos
		pos = next
		if len(line) < minLine || len(line) > math.MaxInt32 { // cannot hold the fragment, or too long to map
			continue
		}
		if norm, _ := normalizeFragment(line, punct, false); !strings.Contains(norm, nOld) {
			continue
		}
		norm, m := normalizeFragment(line, punct, true)
		lastEnd := 0
		for from := 0; ; {
			i := strings.Index(norm[from:], nOld)
			if i < 0 {
				break
			}
			i += from
			s, e := int(m.starts[i]), int(m.ends[i+len(nOld)-1])
			// One source rune may expand to several bytes ("…" to "..."):
			// skip matches overlapping the previous one.
			if s >= lastEnd {
				if len(spans) == maxEditSpans {
					return nil, errTooManySpans{n: len(spans) + 1, atLeast: true}
				}
				spans = append(spans, [2]int{base + s, base + e})
				lastEnd = e
			}
			from = i + len(nOld)
		}
	}
	return spans, nil
}

// offsetMap gives, for every byte of a normalised string, the start and
// end offsets in the source of the text it came from (int32: a line of a
// file edit_file reads is at most a few MiB).
type offsetMap struct{ starts, ends []int32 }

// normalizeFragment collapses each run of whitespace in s to one space
// (and, with punct, maps Unicode punctuation to ASCII). With withMap it
// also returns the offsets of every result byte in s.
func normalizeFragment(s string, punct, withMap bool) (string, offsetMap) {
	var b strings.Builder
	b.Grow(len(s))
	var m offsetMap
	if withMap {
		m = offsetMap{make([]int32, 0, len(s)), make([]int32, 0, len(s))}
	}
	inSpace := false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			if inSpace {
				if withMap {
					m.ends[len(m.ends)-1] = int32(i + size)
				}
			} else {
				b.WriteByte(' ')
				if withMap {
					m.starts = append(m.starts, int32(i))
					m.ends = append(m.ends, int32(i+size))
				}
				inSpace = true
			}
			i += size
			continue
		}
		inSpace = false
		rep := s[i : i+size]
		if punct {
			rep = patch.PunctuationEquivalent(r)
		}
		b.WriteString(rep)
		if withMap {
			for range len(rep) {
				m.starts = append(m.starts, int32(i))
				m.ends = append(m.ends, int32(i+size))
			}
		}
		i += size
	}
	return b.String(), m
}

// lineList names the lines where the first max spans start.
func lineList(content string, spans [][2]int, max int) string {
	var parts []string
	for i, s := range spans {
		if i == max {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprint(strings.Count(content[:s[0]], "\n")+1))
	}
	return strings.Join(parts, ", ")
}
