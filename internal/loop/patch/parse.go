package patch

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Markers of the v4a format.
const (
	BeginMarker     = "*** Begin Patch"
	EndMarker       = "*** End Patch"
	AddPrefix       = "*** Add File: "
	DeletePrefix    = "*** Delete File: "
	UpdatePrefix    = "*** Update File: "
	MovePrefix      = "*** Move to: "
	EndOfFileMarker = "*** End of File"
)

// OpKind is the kind of a file operation.
type OpKind string

// Operation kinds.
const (
	OpAdd    OpKind = "add"
	OpDelete OpKind = "delete"
	OpUpdate OpKind = "update"
)

// Patch is a parsed patch: its operations in order.
type Patch struct {
	Ops []Operation
}

// Operation is one file operation of a patch.
type Operation struct {
	Kind OpKind
	// Path is the file the operation acts on, as written in the patch
	// (cleaned: "./a//b" becomes "a/b").
	Path string
	// MoveTo is the new path of an Update File with "*** Move to:"; empty
	// otherwise.
	MoveTo string
	// Content is the whole new file of an Add File.
	Content string
	// Hunks are the changes of an Update File, in file order.
	Hunks []Hunk
	// Line is the 1-based line of the operation's header in the patch.
	Line int
}

// LineKind is the prefix of a hunk line.
type LineKind byte

// Hunk line kinds.
const (
	Context LineKind = ' '
	Remove  LineKind = '-'
	Insert  LineKind = '+'
)

// HunkLine is one line of a hunk, without its prefix.
type HunkLine struct {
	Kind LineKind
	Text string
}

// Hunk is one "@@" section of an Update File.
type Hunk struct {
	// Hint is the text after "@@ " (a line near the change, typically the
	// enclosing function), or empty.
	Hint  string
	Lines []HunkLine
	// EndOfFile is set by "*** End of File": the hunk's lines end the file.
	EndOfFile bool
	// Line is the 1-based line of the hunk header (or first line) in the patch.
	Line int
}

// oldLines are the lines the hunk expects in the file (context and removed).
func (h *Hunk) oldLines() []string {
	var out []string
	for _, l := range h.Lines {
		if l.Kind != Insert {
			out = append(out, l.Text)
		}
	}
	return out
}

// ParseError is a malformed patch. Line is 1-based (0 when not tied to a line).
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("invalid patch: line %d: %s", e.Line, e.Msg)
	}
	return "invalid patch: " + e.Msg
}

func parseErr(line int, format string, args ...any) error {
	return &ParseError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// heredocStart matches a shell heredoc wrapper some models put around patches
// ("<<'EOF'", "apply_patch <<EOF").
var heredocStart = regexp.MustCompile(`^(?:apply_patch\s+)?<<\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?$`)

// unifiedRange matches a unified-diff range header after "@@ " ("-1,3 +1,4 @@").
var unifiedRange = regexp.MustCompile(`^-\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?`)

// Parse parses patch text in the v4a format. CRLF line endings and a
// surrounding shell heredoc are tolerated; anything else malformed is a
// *ParseError naming the line.
func Parse(text string) (*Patch, error) {
	text = strings.TrimSpace(text)
	if i := strings.IndexByte(text, '\n'); i > 0 && text[i-1] == '\r' {
		// A CRLF patch (judged by its first line; a lone trailing \r on a
		// line of an LF patch is content).
		text = strings.ReplaceAll(text, "\r\n", "\n")
	}
	lines := strings.Split(text, "\n")
	offset := 0 // patch lines removed before lines[0], for error line numbers
	if len(lines) >= 2 {
		if m := heredocStart.FindStringSubmatch(strings.TrimSpace(lines[0])); m != nil &&
			strings.TrimSpace(lines[len(lines)-1]) == m[1] {
			lines = lines[1 : len(lines)-1]
			offset = 1
		}
	}
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != BeginMarker {
		return nil, parseErr(1, "the first line of the patch must be %q", BeginMarker)
	}
	if len(lines) < 2 || strings.TrimSpace(lines[len(lines)-1]) != EndMarker {
		return nil, parseErr(len(lines)+offset, "the last line of the patch must be %q", EndMarker)
	}
	p := &parser{lines: lines[1 : len(lines)-1], base: 2 + offset}
	if err := p.parse(); err != nil {
		return nil, err
	}
	if len(p.ops) == 0 {
		return nil, parseErr(0, "the patch contains no file operations (expected %q, %q or %q)",
			strings.TrimSpace(AddPrefix), strings.TrimSpace(UpdatePrefix), strings.TrimSpace(DeletePrefix))
	}
	return &Patch{Ops: p.ops}, nil
}

type parser struct {
	lines []string
	base  int // patch line number of lines[0]
	i     int
	ops   []Operation
}

func (p *parser) lineNo() int { return p.base + p.i }

// isFileHeader reports whether l starts a new file operation.
func isFileHeader(l string) bool {
	return hasHeader(l, AddPrefix) || hasHeader(l, DeletePrefix) || hasHeader(l, UpdatePrefix)
}

// hasHeader reports whether l starts with prefix (also when l is the prefix
// without its trailing space, so a missing path gets a clear error).
func hasHeader(l, prefix string) bool {
	return strings.HasPrefix(l, prefix) || strings.TrimRight(l, " \t") == strings.TrimSpace(prefix)
}

// afterHeader returns l without prefix.
func afterHeader(l, prefix string) string {
	if strings.HasPrefix(l, prefix) {
		return l[len(prefix):]
	}
	return ""
}

func cleanPath(raw string, line int, header string) (string, error) {
	p := strings.TrimSpace(raw)
	if p == "" {
		return "", parseErr(line, "%q needs a file path", strings.TrimSpace(header))
	}
	if strings.ContainsRune(p, 0) {
		return "", parseErr(line, "file path %q contains a NUL byte", p)
	}
	return path.Clean(p), nil
}

func (p *parser) parse() error {
	for p.i < len(p.lines) {
		raw := p.lines[p.i]
		// Operation headers may be indented, as models sometimes write them
		// (the reference parser trims them too).
		l := strings.TrimSpace(raw)
		switch {
		case hasHeader(l, AddPrefix):
			if err := p.parseAdd(l); err != nil {
				return err
			}
		case hasHeader(l, DeletePrefix):
			name, err := cleanPath(afterHeader(l, DeletePrefix), p.lineNo(), DeletePrefix)
			if err != nil {
				return err
			}
			p.ops = append(p.ops, Operation{Kind: OpDelete, Path: name, Line: p.lineNo()})
			p.i++
		case hasHeader(l, UpdatePrefix):
			if err := p.parseUpdate(l); err != nil {
				return err
			}
		case strings.TrimSpace(l) == "":
			p.i++ // blank lines between operations are harmless
		default:
			return parseErr(p.lineNo(), "unexpected line %q: expected %q, %q, %q or %q",
				truncateForMsg(raw), strings.TrimSpace(AddPrefix), strings.TrimSpace(UpdatePrefix),
				strings.TrimSpace(DeletePrefix), EndMarker)
		}
	}
	return nil
}

func (p *parser) parseAdd(header string) error {
	line := p.lineNo()
	name, err := cleanPath(afterHeader(header, AddPrefix), line, AddPrefix)
	if err != nil {
		return err
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if isFileHeader(strings.TrimLeft(l, " \t")) {
			break
		}
		rest, ok := strings.CutPrefix(l, "+")
		if !ok {
			return parseErr(p.lineNo(), "in %q: every line of an added file must start with '+', got %q",
				AddPrefix+name, truncateForMsg(l))
		}
		b.WriteString(rest)
		b.WriteByte('\n')
		p.i++
	}
	p.ops = append(p.ops, Operation{Kind: OpAdd, Path: name, Content: b.String(), Line: line})
	return nil
}

func (p *parser) parseUpdate(header string) error {
	line := p.lineNo()
	name, err := cleanPath(afterHeader(header, UpdatePrefix), line, UpdatePrefix)
	if err != nil {
		return err
	}
	op := Operation{Kind: OpUpdate, Path: name, Line: line}
	p.i++
	if p.i < len(p.lines) && hasHeader(p.lines[p.i], MovePrefix) {
		to, err := cleanPath(afterHeader(p.lines[p.i], MovePrefix), p.lineNo(), MovePrefix)
		if err != nil {
			return err
		}
		op.MoveTo = to
		p.i++
	}
	var cur *Hunk
	closed := false // the current hunk ended with *** End of File
	finish := func() error {
		if cur == nil {
			return nil
		}
		if len(cur.Lines) == 0 {
			return parseErr(cur.Line, "in %q: hunk %d is empty (a hunk needs at least one ' ', '-' or '+' line)",
				UpdatePrefix+name, len(op.Hunks)+1)
		}
		op.Hunks = append(op.Hunks, *cur)
		cur = nil
		return nil
	}
	for p.i < len(p.lines) {
		raw := p.lines[p.i]
		if isFileHeader(raw) {
			break
		}
		trimmed := strings.TrimRight(raw, " \t")
		switch {
		case strings.TrimSpace(raw) == "" && (closed || cur == nil):
			// Blank lines between hunks (after "*** End of File", or before
			// the first hunk) separate them; inside a hunk a blank line is
			// an empty context line.
		case strings.HasPrefix(trimmed, "@@"):
			if err := finish(); err != nil {
				return err
			}
			hint := parseHint(strings.TrimPrefix(trimmed, "@@"))
			cur = &Hunk{Hint: hint, Line: p.lineNo()}
			closed = false
		case trimmed == EndOfFileMarker:
			if cur == nil || closed || len(cur.Lines) == 0 {
				return parseErr(p.lineNo(), "in %q: %q must follow the lines of a hunk", UpdatePrefix+name, EndOfFileMarker)
			}
			cur.EndOfFile = true
			closed = true
		case hasHeader(raw, MovePrefix):
			return parseErr(p.lineNo(), "in %q: %q must come right after the %q line",
				UpdatePrefix+name, strings.TrimSpace(MovePrefix), strings.TrimSpace(UpdatePrefix))
		case raw == "" || raw[0] == ' ' || raw[0] == '-' || raw[0] == '+':
			if closed {
				return parseErr(p.lineNo(), "in %q: lines after %q must start a new hunk with \"@@\"",
					UpdatePrefix+name, EndOfFileMarker)
			}
			if cur == nil {
				if len(op.Hunks) > 0 {
					return parseErr(p.lineNo(), "in %q: expected \"@@\" to start the next hunk", UpdatePrefix+name)
				}
				cur = &Hunk{Line: p.lineNo()} // the first hunk may omit its "@@" line
			}
			hl := HunkLine{Kind: Context}
			if raw != "" {
				hl = HunkLine{Kind: LineKind(raw[0]), Text: raw[1:]}
			}
			cur.Lines = append(cur.Lines, hl)
		case strings.HasPrefix(raw, "***"):
			return parseErr(p.lineNo(), "unknown marker %q in %q", truncateForMsg(raw), UpdatePrefix+name)
		default:
			where := fmt.Sprintf("in %q", UpdatePrefix+name)
			if cur != nil {
				where += fmt.Sprintf(", hunk %d", len(op.Hunks)+1)
			}
			return parseErr(p.lineNo(), "%s: unexpected line %q: hunk lines must start with ' ' (context), '-' (remove) or '+' (add)",
				where, truncateForMsg(raw))
		}
		p.i++
	}
	if err := finish(); err != nil {
		return err
	}
	if len(op.Hunks) == 0 && op.MoveTo == "" {
		return parseErr(line, "%q has no hunks (add \"@@\" sections with the changes)", UpdatePrefix+name)
	}
	p.ops = append(p.ops, op)
	return nil
}

// truncateForMsg shortens s for an error message.
func truncateForMsg(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// parseHint extracts the context hint of an "@@" line: surrounding space, a
// unified-diff range ("-1,3 +1,4 @@") and a closing "@@" are dropped.
func parseHint(s string) string {
	for {
		h := strings.TrimSpace(s)
		h = unifiedRange.ReplaceAllString(h, "")
		h = strings.TrimSpace(strings.TrimSuffix(h, "@@"))
		if h == s {
			return h
		}
		s = h
	}
}

// String formats p in the v4a format; Parse(p.String()) yields the same
// operations.
func (p *Patch) String() string {
	var b strings.Builder
	b.WriteString(BeginMarker + "\n")
	for _, op := range p.Ops {
		switch op.Kind {
		case OpAdd:
			b.WriteString(AddPrefix + op.Path + "\n")
			content := strings.TrimSuffix(op.Content, "\n")
			if op.Content != "" {
				for _, l := range strings.Split(content, "\n") {
					b.WriteString("+" + l + "\n")
				}
			}
		case OpDelete:
			b.WriteString(DeletePrefix + op.Path + "\n")
		case OpUpdate:
			b.WriteString(UpdatePrefix + op.Path + "\n")
			if op.MoveTo != "" {
				b.WriteString(MovePrefix + op.MoveTo + "\n")
			}
			for _, h := range op.Hunks {
				if h.Hint != "" {
					b.WriteString("@@ " + h.Hint + "\n")
				} else {
					b.WriteString("@@\n")
				}
				for _, l := range h.Lines {
					b.WriteByte(byte(l.Kind))
					b.WriteString(l.Text + "\n")
				}
				if h.EndOfFile {
					b.WriteString(EndOfFileMarker + "\n")
				}
			}
		}
	}
	b.WriteString(EndMarker + "\n")
	return b.String()
}
