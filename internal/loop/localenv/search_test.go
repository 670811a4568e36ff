package localenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func grepFixture(t *testing.T, opts ...Option) *Env {
	t.Helper()
	e, dir := newEnv(t, opts...)
	mustWrite(t, filepath.Join(dir, "a.go"), "package a\nfunc Hello() {}\n// hello again\n")
	mustWrite(t, filepath.Join(dir, "sub/b.py"), "def hello():\n    pass\n")
	mustWrite(t, filepath.Join(dir, "sub/deep/c.go"), "// HELLO\n")
	mustWrite(t, filepath.Join(dir, "bin.dat"), "hello\x00world")
	mustWrite(t, filepath.Join(dir, ".git/config"), "hello from git\n")
	return e
}

func TestGrepWalk(t *testing.T) {
	e := grepFixture(t, WithRipgrep(false))
	tests := []struct {
		name      string
		pattern   string
		path      string
		opts      tool.GrepOptions
		want      []tool.GrepMatch
		truncated bool
	}{
		{"case sensitive", "hello", "", tool.GrepOptions{}, []tool.GrepMatch{
			{Path: "a.go", Line: 3, Text: "// hello again"},
			{Path: "sub/b.py", Line: 1, Text: "def hello():"},
		}, false},
		{"case insensitive", "hello", ".", tool.GrepOptions{CaseInsensitive: true}, []tool.GrepMatch{
			{Path: "a.go", Line: 2, Text: "func Hello() {}"},
			{Path: "a.go", Line: 3, Text: "// hello again"},
			{Path: "sub/b.py", Line: 1, Text: "def hello():"},
			{Path: "sub/deep/c.go", Line: 1, Text: "// HELLO"},
		}, false},
		{"glob filter", "(?i)hello", "", tool.GrepOptions{GlobFilter: "*.go"}, []tool.GrepMatch{
			{Path: "a.go", Line: 2, Text: "func Hello() {}"},
			{Path: "a.go", Line: 3, Text: "// hello again"},
			{Path: "sub/deep/c.go", Line: 1, Text: "// HELLO"},
		}, false},
		{"glob filter with dirs", "(?i)hello", "", tool.GrepOptions{GlobFilter: "sub/**/*.go"}, []tool.GrepMatch{
			{Path: "sub/deep/c.go", Line: 1, Text: "// HELLO"},
		}, false},
		{"sub path", "hello", "sub", tool.GrepOptions{}, []tool.GrepMatch{
			{Path: "sub/b.py", Line: 1, Text: "def hello():"},
		}, false},
		{"single file", "Hello", "a.go", tool.GrepOptions{}, []tool.GrepMatch{
			{Path: "a.go", Line: 2, Text: "func Hello() {}"},
		}, false},
		{"max results", "(?i)hello", "", tool.GrepOptions{MaxResults: 2}, []tool.GrepMatch{
			{Path: "a.go", Line: 2, Text: "func Hello() {}"},
			{Path: "a.go", Line: 3, Text: "// hello again"},
		}, true},
		{"no match", "zzz", "", tool.GrepOptions{}, []tool.GrepMatch{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.Grep(t.Context(), tt.pattern, tt.path, tt.opts)
			if err != nil {
				t.Fatalf("Grep: %v", err)
			}
			if !slices.Equal(res.Matches, tt.want) || res.Truncated != tt.truncated {
				t.Errorf("Grep = %+v (truncated %v), want %+v (truncated %v)", res.Matches, res.Truncated, tt.want, tt.truncated)
			}
		})
	}
	if _, err := e.Grep(t.Context(), "(", "", tool.GrepOptions{}); err == nil || !strings.Contains(err.Error(), "invalid regular expression") {
		t.Errorf("bad regexp: %v", err)
	}
	if _, err := e.Grep(t.Context(), "x", "missing", tool.GrepOptions{}); err == nil {
		t.Error("Grep on a missing path succeeded")
	}
}

// TestGrepRipgrepMatchesWalk checks that rg (when on PATH) answers like the
// Go walk.
func TestGrepRipgrepMatchesWalk(t *testing.T) {
	if _, err := exec.LookPath("rg"); err != nil {
		t.Skip("rg not on PATH")
	}
	withRg := grepFixture(t)
	mustWrite(t, filepath.Join(withRg.WorkingDirectory(), ".hidden/h.go"), "// hello hidden\n")
	walk, err := New(withRg.WorkingDirectory(), WithRipgrep(false))
	if err != nil {
		t.Fatal(err)
	}
	defer walk.Close()
	for _, opts := range []tool.GrepOptions{
		{CaseInsensitive: true, GlobFilter: "*.go"},
		{CaseInsensitive: true},
		{},
		{CaseInsensitive: true, MaxResults: 2},
	} {
		got, err := withRg.Grep(t.Context(), "hello", "", opts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := walk.Grep(t.Context(), "hello", "", opts)
		if err != nil {
			t.Fatal(err)
		}
		if opts.MaxResults > 0 {
			// Which matches survive the cut may differ; the count and flag may not.
			if len(got.Matches) != len(want.Matches) || got.Truncated != want.Truncated {
				t.Errorf("%+v: rg %+v, walk %+v", opts, got, want)
			}
			continue
		}
		if !slices.Equal(got.Matches, want.Matches) || got.Truncated != want.Truncated {
			t.Errorf("%+v: rg %+v, walk %+v", opts, got.Matches, want.Matches)
		}
	}
}

func TestGlob(t *testing.T) {
	e, dir := newEnv(t)
	files := []string{"old.go", "mid.go", "new.go", "x/y.go", "x/z/w.go", "x/readme.md", ".git/hook.go"}
	base := time.Now().Add(-time.Hour)
	for i, f := range files {
		p := filepath.Join(dir, f)
		mustWrite(t, p, "x")
		mt := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		pattern, path string
		want          []string
	}{
		{"*.go", "", []string{"new.go", "mid.go", "old.go"}},
		{"**/*.go", "", []string{"x/z/w.go", "x/y.go", "new.go", "mid.go", "old.go"}},
		{"x/**", "", []string{"x/readme.md", "x/z/w.go", "x/y.go"}},
		{"*/*.go", "", []string{"x/y.go"}},
		{"**/*.go", "x", []string{"x/z/w.go", "x/y.go"}},
		{"*.md", "x", []string{"x/readme.md"}},
		{"nothing*", "", []string{}},
	}
	for _, tt := range tests {
		got, err := e.Glob(t.Context(), tt.pattern, tt.path)
		if err != nil {
			t.Fatalf("Glob(%q, %q): %v", tt.pattern, tt.path, err)
		}
		if !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("Glob(%q, %q) = %q, want %q", tt.pattern, tt.path, got, tt.want)
		}
	}
	for _, bad := range []string{"", "/abs/*", "[x"} {
		if _, err := e.Glob(t.Context(), bad, ""); err == nil {
			t.Errorf("Glob(%q) succeeded, want error", bad)
		}
	}
}

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"**", "a/b/c", true},
		{"**/c", "c", true},
		{"**/c", "a/b/c", true},
		{"a/**/c", "a/c", true},
		{"a/**/c", "a/x/y/c", true},
		{"a/**/c", "b/x/c", false},
		{"*.go", "a/b.go", false},
		{"a/*/c", "a/b/c", true},
		{"a/*/c", "a/b/d/c", false},
		{"**/**/x", "x", true},
	}
	for _, tt := range tests {
		if got := matchGlob(tt.pattern, tt.name); got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}
