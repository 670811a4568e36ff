package patch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Store is the file system a patch is applied to. Paths are the cleaned
// paths of the patch; the implementation resolves and confines them.
type Store interface {
	Read(ctx context.Context, path string) ([]byte, error)
	Write(ctx context.Context, path string, data []byte) error
	Delete(ctx context.Context, path string) error
	Exists(ctx context.Context, path string) (bool, error)
}

// ApplyError is a patch that does not fit the files. Path is the file of the
// failing operation, Op its kind; Hunk is 1-based (0 when not about a hunk).
type ApplyError struct {
	Op   OpKind
	Path string
	Hunk int
	Msg  string
	Err  error // underlying store error, if any
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	b.WriteString("apply patch: ")
	switch e.Op {
	case OpAdd:
		b.WriteString("Add File ")
	case OpDelete:
		b.WriteString("Delete File ")
	case OpUpdate:
		b.WriteString("Update File ")
	}
	b.WriteString(e.Path)
	if e.Hunk > 0 {
		fmt.Fprintf(&b, ", hunk %d", e.Hunk)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *ApplyError) Unwrap() error { return e.Err }

// FileChange describes what one operation did.
type FileChange struct {
	Kind    OpKind `json:"kind"`
	Path    string `json:"path"`
	MovedTo string `json:"movedTo,omitempty"`
	// Hunks applied (updates only).
	Hunks int `json:"hunks,omitempty"`
	// Fuzz is the loosest matching level any hunk needed.
	Fuzz Fuzz `json:"fuzz"`
	// Added and Removed count lines.
	Added   int `json:"added"`
	Removed int `json:"removed"`
}

// Result lists the changes of an applied patch, in patch order.
type Result struct {
	Changes []FileChange `json:"changes"`
}

// Summary is a model-readable description of the result, one line per
// operation in the codex style ("A path", "M path", "D path"), with notes on
// fuzzy matches.
func (r *Result) Summary() string {
	var b strings.Builder
	b.WriteString("Success. Updated the following files:\n")
	for _, c := range r.Changes {
		switch c.Kind {
		case OpAdd:
			fmt.Fprintf(&b, "A %s\n", c.Path)
		case OpDelete:
			fmt.Fprintf(&b, "D %s\n", c.Path)
		case OpUpdate:
			if c.MovedTo != "" {
				fmt.Fprintf(&b, "M %s -> %s\n", c.Path, c.MovedTo)
			} else {
				fmt.Fprintf(&b, "M %s\n", c.Path)
			}
		}
	}
	for _, c := range r.Changes {
		if c.Fuzz != FuzzExact {
			fmt.Fprintf(&b, "Note: hunks for %s matched %s; check the result.\n", c.Path, c.Fuzz)
		}
	}
	return b.String()
}

// ApplyText parses text and applies it to store.
func ApplyText(ctx context.Context, store Store, text string) (*Result, error) {
	p, err := Parse(text)
	if err != nil {
		return nil, err
	}
	return Apply(ctx, store, p)
}

// fileState is a file as the patch sees it while being applied.
type fileState struct {
	exists  bool
	content []byte
}

// Apply applies p to store atomically: all operations are computed against
// an in-memory overlay first; the store is changed only if all succeed.
func Apply(ctx context.Context, store Store, p *Patch) (*Result, error) {
	if p == nil || len(p.Ops) == 0 {
		return nil, &ParseError{Msg: "the patch contains no file operations"}
	}
	orig := map[string]fileState{}
	cur := map[string]fileState{}
	var order []string // paths in first-touch order

	load := func(path string) (fileState, error) {
		if st, ok := cur[path]; ok {
			return st, nil
		}
		exists, err := store.Exists(ctx, path)
		if err != nil {
			return fileState{}, err
		}
		st := fileState{exists: exists}
		orig[path] = st // content is read lazily by readContent
		cur[path] = st
		order = append(order, path)
		return st, nil
	}
	readContent := func(path string) ([]byte, error) {
		st := cur[path]
		if st.content != nil {
			return st.content, nil
		}
		data, err := store.Read(ctx, path)
		if err != nil {
			return nil, err
		}
		if data == nil {
			data = []byte{}
		}
		st.content = data
		cur[path] = st
		if o := orig[path]; o.exists && o.content == nil {
			o.content = data
			orig[path] = o
		}
		return data, nil
	}

	res := &Result{}
	for _, op := range p.Ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st, err := load(op.Path)
		if err != nil {
			return nil, &ApplyError{Op: op.Kind, Path: op.Path, Msg: "cannot check the file", Err: err}
		}
		switch op.Kind {
		case OpAdd:
			if st.exists {
				return nil, &ApplyError{Op: op.Kind, Path: op.Path,
					Msg: "the file already exists; use \"*** Update File:\" to change it or delete it first"}
			}
			cur[op.Path] = fileState{exists: true, content: []byte(op.Content)}
			res.Changes = append(res.Changes, FileChange{Kind: OpAdd, Path: op.Path, Added: countLines(op.Content)})
		case OpDelete:
			if !st.exists {
				return nil, &ApplyError{Op: op.Kind, Path: op.Path, Msg: "the file does not exist"}
			}
			data, err := readContent(op.Path)
			if err != nil {
				return nil, &ApplyError{Op: op.Kind, Path: op.Path, Msg: "cannot read the file", Err: err}
			}
			cur[op.Path] = fileState{}
			res.Changes = append(res.Changes, FileChange{Kind: OpDelete, Path: op.Path, Removed: countLines(string(data))})
		case OpUpdate:
			if !st.exists {
				return nil, &ApplyError{Op: op.Kind, Path: op.Path,
					Msg: "the file does not exist; use \"*** Add File:\" to create it"}
			}
			data, err := readContent(op.Path)
			if err != nil {
				return nil, &ApplyError{Op: op.Kind, Path: op.Path, Msg: "cannot read the file", Err: err}
			}
			newContent, change, err := applyHunks(ctx, op, string(data))
			if err != nil {
				return nil, err
			}
			target := op.Path
			if op.MoveTo != "" && op.MoveTo != op.Path {
				dst, err := load(op.MoveTo)
				if err != nil {
					return nil, &ApplyError{Op: op.Kind, Path: op.Path, Msg: "cannot check the move destination " + op.MoveTo, Err: err}
				}
				if dst.exists {
					return nil, &ApplyError{Op: op.Kind, Path: op.Path,
						Msg: fmt.Sprintf("cannot move to %s: that file already exists", op.MoveTo)}
				}
				cur[op.Path] = fileState{}
				target = op.MoveTo
				change.MovedTo = op.MoveTo
			}
			cur[target] = fileState{exists: true, content: []byte(newContent)}
			res.Changes = append(res.Changes, change)
		default:
			return nil, &ApplyError{Op: op.Kind, Path: op.Path, Msg: "unknown operation"}
		}
	}
	if err := commit(ctx, store, order, orig, cur); err != nil {
		return nil, err
	}
	return res, nil
}

// commit writes the final states: first all writes, then all deletes. On a
// failure it restores what it already changed (best effort).
func commit(ctx context.Context, store Store, order []string, orig, cur map[string]fileState) error {
	var done []string
	rollback := func(cause error) error {
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			p := done[i]
			o := orig[p]
			// Use a context that survives cancellation of ctx: a half-applied
			// patch is worse than a slightly late rollback.
			rctx := context.WithoutCancel(ctx)
			if o.exists {
				if err := store.Write(rctx, p, o.content); err != nil {
					errs = append(errs, fmt.Errorf("restore %s: %w", p, err))
				}
			} else if err := store.Delete(rctx, p); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w (rollback incomplete: %w)", cause, errors.Join(errs...))
		}
		return cause
	}
	for _, p := range order {
		c, o := cur[p], orig[p]
		if !c.exists || (o.exists && string(o.content) == string(c.content) && o.content != nil) {
			continue
		}
		if err := store.Write(ctx, p, c.content); err != nil {
			return rollback(&ApplyError{Op: OpUpdate, Path: p, Msg: "cannot write the file", Err: err})
		}
		done = append(done, p)
	}
	for _, p := range order {
		c, o := cur[p], orig[p]
		if c.exists || !o.exists {
			continue
		}
		if err := store.Delete(ctx, p); err != nil {
			return rollback(&ApplyError{Op: OpDelete, Path: p, Msg: "cannot delete the file", Err: err})
		}
		done = append(done, p)
	}
	return nil
}

func countLines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// splitKeepEndings splits content into lines without their endings and
// returns each line's own ending ("\r\n", "\n", or "" for a last line
// without one) and the ending new lines get: the file's more frequent one
// (CRLF on a tie with at least one CRLF), as the reference implementation
// detects it.
func splitKeepEndings(content string) (lines, endings []string, eol string) {
	crlf, lf := 0, 0
	for pos := 0; pos < len(content); {
		i := strings.IndexByte(content[pos:], '\n')
		if i < 0 {
			lines = append(lines, content[pos:])
			endings = append(endings, "")
			break
		}
		end := pos + i
		ending := "\n"
		if end > pos && content[end-1] == '\r' {
			end--
			ending = "\r\n"
			crlf++
		} else {
			lf++
		}
		lines = append(lines, content[pos:end])
		endings = append(endings, ending)
		pos += i + 1
	}
	eol = "\n"
	if crlf > 0 && crlf >= lf {
		eol = "\r\n"
	}
	return lines, endings, eol
}

// applyHunks applies the hunks of an Update File to content. Every line
// keeps its own line ending (a file with mixed endings stays mixed); added
// lines get the file's prevailing ending. A file that lacked a final newline
// keeps lacking it only if its last line was not touched.
func applyHunks(ctx context.Context, op Operation, content string) (string, FileChange, error) {
	change := FileChange{Kind: OpUpdate, Path: op.Path, Hunks: len(op.Hunks)}
	lines, endings, eol := splitKeepEndings(content)
	idx := newLineIndex(lines)

	type line struct{ text, ending string }
	type replacement struct {
		start, n int
		with     []line
	}
	var reps []replacement
	cursor := 0
	for hi := range op.Hunks {
		h := &op.Hunks[hi]
		herr := func(format string, args ...any) error {
			return &ApplyError{Op: OpUpdate, Path: op.Path, Hunk: hi + 1, Msg: fmt.Sprintf(format, args...)}
		}
		from := cursor
		hinted := false
		if h.Hint != "" {
			at, _, err := idx.findHint(ctx, h.Hint, cursor)
			if err != nil {
				return "", change, err
			}
			if at < 0 {
				return "", change, herr("context hint %q (the text after @@) not found after line %d; "+
					"the hint must be a line of the file, and hunks must be in file order", truncateForMsg(h.Hint), cursor)
			}
			from = at // the hint line may itself be the first context line
			hinted = true
		}
		old := h.oldLines()
		var newLines []line
		for _, l := range h.Lines {
			switch l.Kind {
			case Insert:
				change.Added++
			case Remove:
				change.Removed++
			}
		}
		if len(old) == 0 {
			// Addition only: right after the hint line, else at the end of
			// the file. It does not move the cursor, so a later hunk may
			// still change lines before the end (as in the reference).
			at := len(lines)
			if hinted && !h.EndOfFile {
				at = from + 1
				cursor = at
			}
			for _, l := range h.Lines {
				newLines = append(newLines, line{l.Text, eol})
			}
			reps = append(reps, replacement{start: at, n: 0, with: newLines})
			continue
		}
		hits, fuzz, err := idx.find(ctx, old, from, h.EndOfFile, 2)
		if err != nil {
			return "", change, err
		}
		if len(hits) == 0 && len(old) > 1 && old[len(old)-1] == "" {
			// Models often end a hunk with a blank context line the file lacks.
			trimmed := *h
			trimmed.Lines = trimTrailingBlankContext(h.Lines)
			if len(trimmed.Lines) < len(h.Lines) {
				h = &trimmed
				old = h.oldLines()
				if len(old) > 0 {
					hits, fuzz, err = idx.find(ctx, old, from, h.EndOfFile, 2)
					if err != nil {
						return "", change, err
					}
				}
			}
		}
		if len(hits) == 0 {
			where := fmt.Sprintf("after line %d", from)
			if h.EndOfFile {
				where = "at the end of the file (the hunk has \"*** End of File\")"
			}
			return "", change, herr("could not find the expected lines %s; hunks must be in file order and "+
				"their ' ' and '-' lines must match the file. Expected:\n%s", where, quoteLines(old))
		}
		if len(hits) > 1 && !hinted && !h.EndOfFile {
			return "", change, herr("the expected lines match more than one place (lines %d and %d at least); "+
				"add more context lines or an \"@@\" hint line to choose one. Expected:\n%s",
				hits[0]+1, hits[1]+1, quoteLines(old))
		}
		at := hits[0]
		if fuzz > change.Fuzz {
			change.Fuzz = fuzz
		}
		// Lines taking the place of a removed line inherit its ending; the
		// file's own text and ending are kept for context lines.
		j := at
		pendingEnding := ""
		for _, l := range h.Lines {
			switch l.Kind {
			case Context:
				newLines = append(newLines, line{lines[j], endings[j]})
				j++
				pendingEnding = ""
			case Remove:
				if pendingEnding == "" {
					pendingEnding = endings[j]
				}
				j++
			case Insert:
				e := eol
				if pendingEnding != "" {
					e = pendingEnding
				}
				newLines = append(newLines, line{l.Text, e})
			}
		}
		reps = append(reps, replacement{start: at, n: len(old), with: newLines})
		cursor = at + len(old)
	}
	// Additions at the end of the file may come before hunks that change
	// earlier lines: order by position, keeping patch order on ties.
	slices.SortStableFunc(reps, func(a, b replacement) int { return a.start - b.start })

	var b strings.Builder
	b.Grow(len(content) + 64)
	pos := 0
	lastTouched := false
	open := false // the last line written has no ending yet
	write := func(l line) {
		if open {
			b.WriteString(eol) // a line follows the file's unterminated last line
		}
		b.WriteString(l.text)
		b.WriteString(l.ending)
		open = l.ending == ""
	}
	for _, r := range reps {
		if r.start < pos {
			return "", change, &ApplyError{Op: OpUpdate, Path: op.Path,
				Msg: "two hunks change overlapping lines; merge them into one hunk"}
		}
		for k := pos; k < r.start; k++ {
			write(line{lines[k], endings[k]})
		}
		for _, l := range r.with {
			write(l)
		}
		pos = r.start + r.n
		if pos == len(lines) {
			lastTouched = true
		}
	}
	for k := pos; k < len(lines); k++ {
		write(line{lines[k], endings[k]})
	}
	result := b.String()
	// The file's last line had no newline: it keeps lacking one only when
	// it was not touched.
	if lastTouched && result != "" && !strings.HasSuffix(result, "\n") {
		result += eol
	}
	return result, change, nil
}

func trimTrailingBlankContext(lines []HunkLine) []HunkLine {
	if n := len(lines); n > 0 && lines[n-1].Kind == Context && lines[n-1].Text == "" {
		return lines[:n-1]
	}
	return lines
}

// quoteLines renders expected lines for an error message, capped.
func quoteLines(lines []string) string {
	const max = 20
	var b strings.Builder
	for i, l := range lines {
		if i == max {
			fmt.Fprintf(&b, "  ... (%d more lines)\n", len(lines)-max)
			break
		}
		b.WriteString("  ")
		b.WriteString(truncateForMsg(l))
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}
