package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func invocationWithTimeouts(deflt, max time.Duration) *tool.Invocation {
	return &tool.Invocation{DefaultTimeout: deflt, MaxTimeout: max}
}

func TestGrep(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{
		"a.go":     "package a\nfunc Hello() {}\nfunc hello() {}\n",
		"b.py":     "def hello():\n    pass\n",
		"sub/c.go": "// Hello again\n",
	})
	tests := []struct {
		name    string
		v       Variant
		args    map[string]any
		want    string
		isError bool
		has     []string
	}{
		{name: "content", args: map[string]any{"pattern": "func \\w+", "path": "a.go"},
			want: "a.go:2:func Hello() {}\na.go:3:func hello() {}"},
		{name: "glob filter", args: map[string]any{"pattern": "Hello", "glob_filter": "*.go"},
			has: []string{"a.go:2:func Hello() {}", "sub/c.go:1:// Hello again"}},
		{name: "case insensitive", args: map[string]any{"pattern": "HELLO", "path": "b.py", "case_insensitive": true},
			want: "b.py:1:def hello():"},
		{name: "max results", args: map[string]any{"pattern": "ello", "max_results": 1},
			has: []string{"Results limited to 1 matches"}},
		{name: "files with matches", v: Anthropic, args: map[string]any{"pattern": "ello", "output_mode": "files_with_matches", "glob_filter": "*.go"},
			want: "a.go\nsub/c.go"},
		{name: "count", v: Anthropic, args: map[string]any{"pattern": "ello", "output_mode": "count", "glob_filter": "*.go"},
			want: "a.go:2\nsub/c.go:1"},
		{name: "no matches", args: map[string]any{"pattern": "zzz"}, want: "No matches found for pattern \"zzz\" in the working directory."},
		{name: "invalid regex", args: map[string]any{"pattern": "("}, isError: true, has: []string{"invalid regular expression"}},
		{name: "missing path", args: map[string]any{"pattern": "x", "path": "nope"}, isError: true, has: []string{"does not exist"}},
		{name: "bad output mode", v: Anthropic, args: map[string]any{"pattern": "x", "output_mode": "lines"}, isError: true, has: []string{"output_mode must be"}},
		{name: "empty pattern", args: map[string]any{"pattern": ""}, isError: true, has: []string{`"pattern" parameter is required`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.v
			if v == "" {
				v = OpenAI
			}
			res, _ := call{env: env}.run(t, Grep(v), tt.args)
			expect(t, res, tt.isError, tt.has...)
			if tt.want != "" && res.Output != tt.want {
				t.Errorf("output:\n%q\nwant:\n%q", res.Output, tt.want)
			}
		})
	}
}

func TestGlob(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{"old.go": "", "src/new.go": "", "src/mid.go": "", "notes.txt": ""})
	now := time.Now()
	for name, age := range map[string]time.Duration{"old.go": 3 * time.Hour, "src/mid.go": 2 * time.Hour, "src/new.go": time.Hour} {
		mt := now.Add(-age)
		if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(name)), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		args    map[string]any
		want    string
		isError bool
		has     []string
	}{
		{name: "newest first", args: map[string]any{"pattern": "**/*.go"}, want: "src/new.go\nsrc/mid.go\nold.go"},
		{name: "under a path", args: map[string]any{"pattern": "*.go", "path": "src"}, want: "src/new.go\nsrc/mid.go"},
		{name: "none", args: map[string]any{"pattern": "*.rs"}, want: "No files found matching \"*.rs\" in the working directory."},
		{name: "missing path", args: map[string]any{"pattern": "*", "path": "nope"}, isError: true, has: []string{"nope"}},
		{name: "empty pattern", args: map[string]any{"pattern": ""}, isError: true, has: []string{"pattern"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := call{env: env}.run(t, Glob(Gemini), tt.args)
			expect(t, res, tt.isError, tt.has...)
			if tt.want != "" && strings.TrimSpace(res.Output) != tt.want {
				t.Errorf("output:\n%q\nwant:\n%q", res.Output, tt.want)
			}
		})
	}
}
