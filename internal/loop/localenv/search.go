package localenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

const maxMatchText = 2000

// Grep searches files under p for pattern. It uses ripgrep (`rg --json`)
// when it is on PATH and a Go regexp walk otherwise. Both skip .git and
// binary files and search hidden files; only ripgrep also honours
// .gitignore. GlobFilter matches the base name, or the path relative to p
// when it contains a slash. Matches are sorted by path, then line.
func (e *Env) Grep(ctx context.Context, pattern, p string, opts tool.GrepOptions) (*tool.GrepResult, error) {
	if opts.MaxResults <= 0 {
		opts.MaxResults = defaultMaxResults
	}
	expr := pattern
	if opts.CaseInsensitive {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("grep: invalid regular expression: %w", err)
	}
	if opts.GlobFilter != "" {
		if _, err := path.Match(opts.GlobFilter, ""); err != nil {
			return nil, fmt.Errorf("grep: invalid glob filter %q: %w", opts.GlobFilter, err)
		}
	}
	rel, err := e.resolve(p)
	if err != nil {
		return nil, fmt.Errorf("grep: %w", err)
	}
	st, err := e.fsys.Stat(rel)
	if err != nil {
		return nil, mapErr("grep", p, err)
	}
	// Refuse FIFOs, sockets and devices for either backend: ripgrep opens a
	// path named on its command line whatever its type and would block on a
	// FIFO with no writer until the call's deadline.
	if !st.IsDir() && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("grep: %s is not a regular file or directory", p)
	}
	if e.cfg.useRipgrep {
		if rg, err := exec.LookPath("rg"); err == nil {
			return e.grepRipgrep(ctx, rg, pattern, rel, opts)
		}
	}
	return e.grepWalk(ctx, re, rel, st.IsDir(), opts)
}

func (e *Env) grepWalk(ctx context.Context, re *regexp.Regexp, rel string, isDir bool, opts tool.GrepOptions) (*tool.GrepResult, error) {
	res := &tool.GrepResult{Matches: []tool.GrepMatch{}}
	fsys := e.fsys.FS()
	root := filepathToFS(rel)
	errStop := errors.New("stop")
	searchFile := func(name string) error {
		f, err := fsys.Open(name)
		if err != nil {
			return nil // unreadable files are skipped
		}
		defer f.Close()
		br := bufio.NewReaderSize(f, 64<<10)
		head, _ := br.Peek(sniffLen)
		if bytes.IndexByte(head, 0) >= 0 {
			return nil
		}
		line := 0
		for {
			l, err := br.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				// Very long line: collect the rest.
				long := bytes.Clone(l)
				for err == bufio.ErrBufferFull {
					l, err = br.ReadSlice('\n')
					long = append(long, l...)
				}
				l = long
			}
			if len(l) > 0 {
				line++
				text := bytes.TrimRight(l, "\r\n")
				if re.Match(text) {
					if len(res.Matches) >= opts.MaxResults {
						res.Truncated = true
						return errStop
					}
					if len(text) > maxMatchText {
						text = text[:maxMatchText]
					}
					res.Matches = append(res.Matches, tool.GrepMatch{Path: e.display(name), Line: line, Text: string(text)})
				}
			}
			if err != nil {
				return nil
			}
		}
	}
	if !isDir {
		if st, err := e.fsys.Stat(rel); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("grep %s: not a regular file or directory", e.display(rel))
		}
		if err := searchFile(root); err != nil && err != errStop {
			return nil, err
		}
		return res, nil
	}
	err := fs.WalkDir(fsys, root, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == root {
				return err
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() {
			if d.Name() == ".git" && name != root {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if opts.GlobFilter != "" && !globFilterMatch(opts.GlobFilter, relTo(root, name)) {
			return nil
		}
		return searchFile(name)
	})
	if err != nil && err != errStop {
		return nil, mapErr("grep", e.display(rel), err)
	}
	sortMatches(res.Matches)
	return res, nil
}

func globFilterMatch(filter, relPath string) bool {
	if strings.Contains(filter, "/") {
		return matchGlob(filter, relPath)
	}
	ok, _ := path.Match(filter, path.Base(relPath))
	return ok
}

func (e *Env) grepRipgrep(ctx context.Context, rg, pattern, rel string, opts tool.GrepOptions) (*tool.GrepResult, error) {
	args := []string{"--json", "--no-config", "--no-messages", "--hidden", "--glob", "!.git"}
	if opts.CaseInsensitive {
		args = append(args, "-i")
	}
	if opts.GlobFilter != "" {
		args = append(args, "--glob", opts.GlobFilter)
	}
	args = append(args, "-e", pattern, "--", e.abs(rel))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, rg, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("grep: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("grep: start rg: %w", err)
	}
	res := &tool.GrepResult{Matches: []tool.GrepMatch{}}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var msg struct {
			Type string `json:"type"`
			Data struct {
				Path       struct{ Text string } `json:"path"`
				Lines      struct{ Text string } `json:"lines"`
				LineNumber int                   `json:"line_number"`
			} `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) != nil || msg.Type != "match" {
			continue
		}
		if len(res.Matches) >= opts.MaxResults {
			res.Truncated = true
			cancel()
			break
		}
		text := strings.TrimRight(msg.Data.Lines.Text, "\r\n")
		if len(text) > maxMatchText {
			text = text[:maxMatchText]
		}
		p := msg.Data.Path.Text
		if r, ok := within(e.canonRoot, p); ok {
			p = strings.ReplaceAll(r, string(os.PathSeparator), "/")
		}
		res.Matches = append(res.Matches, tool.GrepMatch{Path: p, Line: msg.Data.LineNumber, Text: text})
	}
	_, _ = io.Copy(io.Discard, out)
	err = cmd.Wait()
	if res.Truncated {
		sortMatches(res.Matches)
		return res, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, fmt.Errorf("grep: %w", cerr)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return res, nil // no match
	}
	if err != nil {
		return nil, fmt.Errorf("grep: rg: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	sortMatches(res.Matches)
	return res, nil
}

// sortMatches orders matches by path then line (rg searches in parallel).
func sortMatches(m []tool.GrepMatch) {
	sort.SliceStable(m, func(i, j int) bool {
		if m[i].Path != m[j].Path {
			return m[i].Path < m[j].Path
		}
		return m[i].Line < m[j].Line
	})
}

// Glob lists regular files under p whose path relative to p matches pattern
// (path.Match per segment, `**` matching any number of segments), newest
// modification first. .git directories are skipped. Symlinks are not followed.
func (e *Env) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	if pattern == "" {
		return nil, errors.New("glob: empty pattern")
	}
	if strings.HasPrefix(pattern, "/") {
		return nil, fmt.Errorf("glob: pattern %q must be relative to the search path", pattern)
	}
	if err := validateGlob(pattern); err != nil {
		return nil, fmt.Errorf("glob: %w", err)
	}
	rel, err := e.resolve(p)
	if err != nil {
		return nil, fmt.Errorf("glob: %w", err)
	}
	segs := strings.Split(path.Clean(pattern), "/")
	deep := false
	for _, s := range segs {
		if s == "**" {
			deep = true
		}
	}
	type hit struct {
		name string
		mod  time.Time
	}
	var hits []hit
	fsys := e.fsys.FS()
	root := filepathToFS(rel)
	err = fs.WalkDir(fsys, root, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == root {
				return err
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		r := relTo(root, name)
		if d.IsDir() {
			if name != root && d.Name() == ".git" {
				return fs.SkipDir
			}
			if !deep && r != "." && strings.Count(r, "/")+1 >= len(segs) {
				return fs.SkipDir
			}
			return nil
		}
		if !matchGlob(pattern, r) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		hits = append(hits, hit{name: name, mod: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, mapErr("glob", p, err)
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if !hits[i].mod.Equal(hits[j].mod) {
			return hits[i].mod.After(hits[j].mod)
		}
		return hits[i].name < hits[j].name
	})
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = e.display(h.name)
	}
	return out, nil
}

func filepathToFS(rel string) string {
	return strings.ReplaceAll(rel, string(os.PathSeparator), "/")
}

// relTo returns name relative to root, both fs.FS paths.
func relTo(root, name string) string {
	if root == "." {
		return name
	}
	if name == root {
		return "."
	}
	return strings.TrimPrefix(name, root+"/")
}

func validateGlob(pattern string) error {
	for _, s := range strings.Split(pattern, "/") {
		if s == "**" {
			continue
		}
		if _, err := path.Match(s, ""); err != nil {
			return fmt.Errorf("invalid pattern %q: %w", pattern, err)
		}
	}
	return nil
}

// matchGlob matches a slash-separated relative path against a pattern whose
// segments are path.Match patterns or `**` (zero or more segments).
func matchGlob(pattern, name string) bool {
	return tool.MatchSegments(strings.Split(path.Clean(pattern), "/"), strings.Split(name, "/"))
}
