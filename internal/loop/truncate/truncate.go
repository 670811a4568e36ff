package truncate

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Mode is how character truncation keeps text.
type Mode string

// Truncation modes (seed 000 §5.1).
const (
	// HeadTail keeps the first and last max/2 characters.
	HeadTail Mode = "head_tail"
	// Tail keeps the last max characters.
	Tail Mode = "tail"
)

// Limit is the character limit and mode of one tool.
type Limit struct {
	MaxChars int
	Mode     Mode
}

// DefaultLimits is the table of seed 000 §5.2, extended for the tools the
// table does not name (read_many_files and list_dir follow their closest
// relatives; the subagent tools follow spawn_agent).
var DefaultLimits = map[string]Limit{
	"read_file":       {50_000, HeadTail},
	"shell":           {30_000, HeadTail},
	"grep":            {20_000, Tail},
	"glob":            {20_000, Tail},
	"edit_file":       {10_000, Tail},
	"apply_patch":     {10_000, Tail},
	"write_file":      {1_000, Tail},
	"spawn_agent":     {20_000, HeadTail},
	"read_many_files": {50_000, HeadTail},
	"list_dir":        {20_000, Tail},
	"send_input":      {20_000, HeadTail},
	"wait":            {20_000, HeadTail},
	"close_agent":     {20_000, HeadTail},
}

// Fallback applies to tools with no entry in DefaultLimits (custom tools).
var Fallback = Limit{MaxChars: 30_000, Mode: HeadTail}

// DefaultLineLimits is the line-limit table of seed 000 §5.3 (tools absent
// from it have no line limit), extended with list_dir like glob.
var DefaultLineLimits = map[string]int{
	"shell":    256,
	"grep":     200,
	"glob":     500,
	"list_dir": 500,
}

// Chars truncates output to maxChars characters with mode, inserting the
// seed 000 §5.1 warning marker. maxChars <= 0 disables the limit.
func Chars(output string, maxChars int, mode Mode) string {
	if maxChars <= 0 || len(output) <= maxChars {
		return output // byte length bounds the character count
	}
	n := utf8.RuneCountInString(output)
	if n <= maxChars {
		return output
	}
	removed := n - maxChars
	if mode == Tail {
		return "[WARNING: Tool output was truncated. First " + strconv.Itoa(removed) +
			" characters were removed. The full output is available in the event stream.]\n\n" +
			lastRunes(output, maxChars)
	}
	half := maxChars / 2
	return firstRunes(output, half) +
		"\n\n[WARNING: Tool output was truncated. " + strconv.Itoa(removed) +
		" characters were removed from the middle. The full output is available in the event stream. " +
		"If you need to see specific parts, re-run the tool with more targeted parameters.]\n\n" +
		lastRunes(output, half)
}

// Lines keeps the first maxLines/2 and the last maxLines-maxLines/2 lines
// of output, replacing the rest by "[... N lines omitted ...]". maxLines <= 0
// disables the limit.
func Lines(output string, maxLines int) string {
	if maxLines <= 0 {
		return output
	}
	total := strings.Count(output, "\n") + 1
	if total <= maxLines {
		return output
	}
	head := maxLines / 2
	tail := maxLines - head
	omitted := total - head - tail
	headEnd := 0 // byte index just past the head lines' content
	if head > 0 {
		headEnd = nthIndex(output, head) // index of the head-th newline
	}
	tailStart := len(output)
	if tail > 0 {
		tailStart = nthLastIndex(output, tail) + 1
	}
	var b strings.Builder
	b.Grow(headEnd + len(output) - tailStart + 40)
	if head > 0 {
		b.WriteString(output[:headEnd])
	}
	b.WriteString("\n[... " + strconv.Itoa(omitted) + " lines omitted ...]\n")
	b.WriteString(output[tailStart:])
	return b.String()
}

// Output runs the full pipeline of seed 000 §5.3 for toolName: character
// truncation with the tool's limit and mode, then line truncation. charLimits
// and lineLimits override the defaults per tool (a value <= 0 disables that
// limit); either may be nil.
func Output(output, toolName string, charLimits, lineLimits map[string]int) string {
	lim, ok := DefaultLimits[toolName]
	if !ok {
		lim = Fallback
	}
	if v, ok := charLimits[toolName]; ok {
		lim.MaxChars = v
	}
	result := Chars(output, lim.MaxChars, lim.Mode)
	maxLines, ok := DefaultLineLimits[toolName]
	if v, set := lineLimits[toolName]; set {
		maxLines, ok = v, true
	}
	if ok {
		result = Lines(result, maxLines)
	}
	return result
}

// firstRunes returns the first n characters of s.
func firstRunes(s string, n int) string {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// lastRunes returns the last n characters of s.
func lastRunes(s string, n int) string {
	i := len(s)
	for ; n > 0 && i > 0; n-- {
		if s[i-1] < utf8.RuneSelf {
			i--
			continue
		}
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}

// nthIndex returns the index of the n-th (1-based) newline of s.
func nthIndex(s string, n int) int {
	pos := -1
	for ; n > 0; n-- {
		j := strings.IndexByte(s[pos+1:], '\n')
		pos += j + 1
	}
	return pos
}

// nthLastIndex returns the index of the n-th newline counted from the end.
func nthLastIndex(s string, n int) int {
	pos := len(s)
	for ; n > 0; n-- {
		pos = strings.LastIndexByte(s[:pos], '\n')
	}
	return pos
}
