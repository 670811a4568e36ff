package builtin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pngHeader is the start of a PNG file (enough for type detection).
var pngHeader = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")

func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "l%d\n", i)
	}
	return b.String()
}

func TestReadFile(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{
		"abc.txt":   "a\nb\nc\n",
		"twelve":    numbered(12),
		"big.txt":   numbered(2001),
		"empty":     "",
		"crlf.txt":  "x\r\ny\r\n",
		"bin.dat":   "ab\x00cd",
		"sub/n.txt": "no newline",
	})
	if err := os.WriteFile(filepath.Join(dir, "img.png"), pngHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    any
		want    string // exact output, if set
		isError bool
		has     []string
	}{
		{name: "numbered lines", args: map[string]any{"file_path": "abc.txt"}, want: "1 | a\n2 | b\n3 | c"},
		{name: "absolute path", args: map[string]any{"file_path": filepath.Join(dir, "sub/n.txt")}, want: "1 | no newline"},
		{name: "offset and limit pad numbers", args: map[string]any{"file_path": "twelve", "offset": 9, "limit": 2},
			want: " 9 | l9\n10 | l10\n\n(Showing lines 9-10 of 12. Use offset=11 to read more.)"},
		{name: "float and string integers", args: `{"file_path":"twelve","offset":12.0,"limit":"1"}`, want: "12 | l12"},
		{name: "default limit 2000", args: map[string]any{"file_path": "big.txt"},
			has: []string{"   1 | l1\n", "2000 | l2000\n\n(Showing lines 1-2000 of 2001. Use offset=2001 to read more.)"}},
		{name: "crlf shown without carriage returns", args: map[string]any{"file_path": "crlf.txt"}, want: "1 | x\n2 | y"},
		{name: "empty file", args: map[string]any{"file_path": "empty"}, want: "(empty is empty)"},
		{name: "missing file", args: map[string]any{"file_path": "nope.txt"}, isError: true, has: []string{"nope.txt", "does not exist"}},
		{name: "binary file", args: map[string]any{"file_path": "bin.dat"}, isError: true, has: []string{"binary"}},
		{name: "directory", args: map[string]any{"file_path": "sub"}, isError: true, has: []string{"sub"}},
		{name: "empty path", args: map[string]any{"file_path": ""}, isError: true, has: []string{`"file_path" parameter is required`}},
		{name: "negative offset", args: map[string]any{"file_path": "abc.txt", "offset": -1}, isError: true, has: []string{"offset must be 1 or greater"}},
		{name: "offset past end", args: map[string]any{"file_path": "abc.txt", "offset": 9}, isError: true, has: []string{"beyond the end", "3 lines"}},
		{name: "escape", args: map[string]any{"file_path": "../outside"}, isError: true, has: []string{"outside the workspace"}},
		{name: "malformed arguments", args: `{"file_path": 3}`, isError: true, has: []string{"Invalid arguments for read_file"}},
	}
	c := call{env: env}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := c.run(t, ReadFile(Anthropic), tt.args)
			expect(t, res, tt.isError, tt.has...)
			if tt.want != "" && res.Output != tt.want {
				t.Errorf("output:\n%q\nwant:\n%q", res.Output, tt.want)
			}
			if len(res.Images) != 0 {
				t.Errorf("unexpected images")
			}
		})
	}
	t.Run("image", func(t *testing.T) {
		res, _ := c.run(t, ReadFile(OpenAI), map[string]any{"file_path": "img.png"})
		expect(t, res, false, "image/png")
		if len(res.Images) != 1 || res.Images[0].MediaType != "image/png" || !bytes.Equal(res.Images[0].Data, pngHeader) {
			t.Errorf("images = %+v, want the png", res.Images)
		}
	})
}

func TestWriteFile(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{"old.txt": "old"})
	c := call{env: env}
	tests := []struct {
		name    string
		args    any
		isError bool
		has     []string
		file    string
		content string
	}{
		{name: "create with parents", args: map[string]any{"file_path": "a/b/new.txt", "content": "hello\n"},
			has: []string{"Created a/b/new.txt", "6 bytes"}, file: "a/b/new.txt", content: "hello\n"},
		{name: "overwrite", args: map[string]any{"file_path": "old.txt", "content": "new"},
			has: []string{"Overwrote old.txt", "3 bytes"}, file: "old.txt", content: "new"},
		{name: "empty content", args: map[string]any{"file_path": "e.txt", "content": ""},
			has: []string{"0 bytes"}, file: "e.txt", content: ""},
		{name: "missing content", args: map[string]any{"file_path": "x.txt"}, isError: true, has: []string{`"content" parameter is required`}},
		{name: "empty path", args: map[string]any{"file_path": " ", "content": "x"}, isError: true, has: []string{"file_path"}},
		{name: "escape", args: map[string]any{"file_path": "../../x.txt", "content": "x"}, isError: true, has: []string{"outside the workspace"}},
		{name: "too large", args: map[string]any{"file_path": "huge.txt", "content": strings.Repeat("x", MaxWriteBytes+1)},
			isError: true, has: []string{"at most 10485760 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := c.run(t, WriteFile(Gemini), tt.args)
			expect(t, res, tt.isError, tt.has...)
			if tt.file != "" {
				if got := readBack(t, dir, tt.file); got != tt.content {
					t.Errorf("%s = %q, want %q", tt.file, got, tt.content)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "huge.txt")); !os.IsNotExist(err) {
		t.Errorf("huge.txt was written: %v", err)
	}
}

func TestEditFile(t *testing.T) {
	tests := []struct {
		name    string
		file    string // content of f.txt; "-" means absent
		args    map[string]any
		isError bool
		has     []string
		want    string // f.txt afterwards
	}{
		{name: "unique replacement", file: "a\nfoo()\nb\n",
			args: map[string]any{"old_string": "foo()", "new_string": "bar()"},
			has:  []string{"replaced 1 occurrence", "line 2"}, want: "a\nbar()\nb\n"},
		{name: "not unique", file: "x = 1\nx = 1\nx = 1\n",
			args:    map[string]any{"old_string": "x = 1", "new_string": "x = 2"},
			isError: true, has: []string{"matches 3 locations", "lines 1, 2, 3", "more surrounding context", "replace_all"}, want: "x = 1\nx = 1\nx = 1\n"},
		{name: "replace all", file: "x = 1\nx = 1\ny\n",
			args: map[string]any{"old_string": "x = 1", "new_string": "x = 2", "replace_all": true},
			has:  []string{"replaced 2 occurrence"}, want: "x = 2\nx = 2\ny\n"},
		{name: "not found", file: "abc\n",
			args:    map[string]any{"old_string": "xyz", "new_string": "q"},
			isError: true, has: []string{"old_string was not found in f.txt"}, want: "abc\n"},
		{name: "whitespace fallback reports itself", file: "func f() {\n\treturn  1\n}\n",
			args: map[string]any{"old_string": "func f() {\n    return 1\n}", "new_string": "func f() {\n\treturn 2\n}"},
			has:  []string{"matched after normalising whitespace"}, want: "func f() {\n\treturn 2\n}\n"},
		{name: "unicode fallback reports itself", file: "say(\u201chello\u201d) \u2014 done\n",
			args: map[string]any{"old_string": "say(\"hello\") - done", "new_string": "say(\"hi\")"},
			has:  []string{"Unicode punctuation"}, want: "say(\"hi\")\n"},
		{name: "fuzzy line match keeps the file's indentation", file: "if x {\n\treturn  1\n}\n",
			args: map[string]any{"old_string": "return 1", "new_string": "return 2"},
			has:  []string{"normalising whitespace"}, want: "if x {\n\treturn 2\n}\n"},
		{name: "fuzzy whole lines with newline are replaced whole", file: "if x {\n\treturn  1\n}\n",
			args: map[string]any{"old_string": "    return 1\n", "new_string": "    return 2\n"},
			has:  []string{"normalising whitespace"}, want: "if x {\n    return 2\n}\n"},
		{name: "fuzzy fragment inside a line", file: "a = foo(\u201cx\u201d) + 1\n",
			args: map[string]any{"old_string": "foo(\"x\")", "new_string": "bar(\"x\")"},
			has:  []string{"Unicode punctuation"}, want: "a = bar(\"x\") + 1\n"},
		{name: "fuzzy fragment does not cross lines", file: "foo\nbar\n",
			args:    map[string]any{"old_string": "foo bar", "new_string": "x"},
			isError: true, has: []string{"not found"}, want: "foo\nbar\n"},
		{name: "fuzzy match not unique", file: "\tx  = 1\n\tx = 1\n",
			args:    map[string]any{"old_string": "x = 1 ", "new_string": "x = 2"},
			isError: true, has: []string{"matches 2 locations"}, want: "\tx  = 1\n\tx = 1\n"},
		{name: "crlf file edited with lf strings", file: "one\r\ntwo\r\nthree\r\n",
			args: map[string]any{"old_string": "one\ntwo", "new_string": "1\n2"},
			has:  []string{"replaced 1 occurrence"}, want: "1\r\n2\r\nthree\r\n"},
		{name: "empty old_string creates file", file: "-",
			args: map[string]any{"old_string": "", "new_string": "new\n"},
			has:  []string{"Created f.txt"}, want: "new\n"},
		{name: "empty old_string on non-empty file", file: "keep\n",
			args:    map[string]any{"old_string": "", "new_string": "x"},
			isError: true, has: []string{"already exists and is not empty"}, want: "keep\n"},
		{name: "identical strings", file: "a\n",
			args:    map[string]any{"old_string": "a", "new_string": "a"},
			isError: true, has: []string{"identical"}, want: "a\n"},
		{name: "missing file", file: "-",
			args:    map[string]any{"old_string": "a", "new_string": "b"},
			isError: true, has: []string{"does not exist"}},
		{name: "missing new_string", file: "a\n",
			args:    map[string]any{"old_string": "a"},
			isError: true, has: []string{"new_string"}, want: "a\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, dir := newEnv(t)
			if tt.file != "-" {
				writeFiles(t, dir, map[string]string{"f.txt": tt.file})
			}
			args := map[string]any{"file_path": "f.txt"}
			for k, v := range tt.args {
				args[k] = v
			}
			res, _ := call{env: env}.run(t, EditFile(Anthropic), args)
			expect(t, res, tt.isError, tt.has...)
			if tt.want != "" {
				if got := readBack(t, dir, "f.txt"); got != tt.want {
					t.Errorf("f.txt = %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestListDir(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{"a.txt": "12345", "sub/b.txt": "x", "sub/deep/c.txt": "y"})
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    map[string]any
		want    string
		isError bool
		has     []string
	}{
		{name: "direct children", args: map[string]any{},
			want: "Directory listing for the working directory (3 entries):\na.txt (5 bytes)\nempty/\nsub/"},
		{name: "depth 2", args: map[string]any{"path": "sub", "depth": 2},
			want: "Directory listing for sub (3 entries):\nb.txt (1 bytes)\ndeep/\ndeep/c.txt (1 bytes)"},
		{name: "empty directory", args: map[string]any{"path": "empty"}, want: "Directory empty is empty."},
		{name: "missing", args: map[string]any{"path": "nope"}, isError: true, has: []string{"nope", "does not exist"}},
		{name: "negative depth", args: map[string]any{"depth": -2}, isError: true, has: []string{"depth must be"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := call{env: env}.run(t, ListDir(Gemini), tt.args)
			expect(t, res, tt.isError, tt.has...)
			if tt.want != "" && res.Output != tt.want {
				t.Errorf("output:\n%q\nwant:\n%q", res.Output, tt.want)
			}
		})
	}
}

func TestReadManyFiles(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{
		"README.md":   "# readme\n",
		"src/a.go":    "package a\n",
		"src/b.go":    "package b",
		"src/c.log":   "log\n",
		"bin/tool":    "\x00\x01",
		"docs/x.md":   "x\n",
		"docs/y.md":   "y\n",
		"docs/skip.m": "s\n",
	})
	if err := os.WriteFile(filepath.Join(dir, "logo.png"), pngHeader, 0o644); err != nil {
		t.Fatal(err)
	}
	c := call{env: env}
	t.Run("paths and globs", func(t *testing.T) {
		res, _ := c.run(t, ReadManyFiles(Gemini), map[string]any{"paths": []string{"README.md", "src/*.go", "README.md"}})
		expect(t, res, false, "--- README.md ---\n# readme\n", "--- src/a.go ---\npackage a\n", "--- src/b.go ---\npackage b\n", "--- End of content ---")
		if strings.Count(res.Output, "--- README.md ---") != 1 {
			t.Errorf("README.md read twice:\n%s", res.Output)
		}
	})
	t.Run("exclude, binary and missing are reported", func(t *testing.T) {
		res, _ := c.run(t, ReadManyFiles(Gemini), map[string]any{
			"paths": []string{"docs/**", "bin/tool", "missing.txt"}, "exclude": []string{"*.m"}})
		expect(t, res, false, "--- docs/x.md ---", "--- docs/y.md ---", "bin/tool: skipped, binary file", "missing.txt")
		if strings.Contains(res.Output, "skip.m") {
			t.Errorf("excluded file read:\n%s", res.Output)
		}
	})
	t.Run("image attached", func(t *testing.T) {
		res, _ := c.run(t, ReadManyFiles(Gemini), map[string]any{"paths": []string{"logo.png"}})
		expect(t, res, false, "[image image/png")
		if len(res.Images) != 1 {
			t.Errorf("images = %d, want 1", len(res.Images))
		}
	})
	t.Run("nothing read", func(t *testing.T) {
		res, _ := c.run(t, ReadManyFiles(Gemini), map[string]any{"paths": []string{"*.none"}})
		expect(t, res, true, "no files were read", "*.none: no files matched")
	})
	t.Run("no paths", func(t *testing.T) {
		res, _ := c.run(t, ReadManyFiles(Gemini), map[string]any{"paths": []string{}})
		expect(t, res, true, "at least one")
	})
}
