package patch

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		patch string
		want  []Operation
	}{
		{
			name:  "add file",
			patch: "*** Begin Patch\n*** Add File: src/a.py\n+def greet(name):\n+    return name\n*** End Patch\n",
			want:  []Operation{{Kind: OpAdd, Path: "src/a.py", Content: "def greet(name):\n    return name\n", Line: 2}},
		},
		{
			name:  "add empty file",
			patch: "*** Begin Patch\n*** Add File: empty.txt\n*** End Patch",
			want:  []Operation{{Kind: OpAdd, Path: "empty.txt", Line: 2}},
		},
		{
			name:  "delete file",
			patch: "*** Begin Patch\n*** Delete File: ./old//mod.py\n*** End Patch",
			want:  []Operation{{Kind: OpDelete, Path: "old/mod.py", Line: 2}},
		},
		{
			name:  "update with two hunks and hints",
			patch: "*** Begin Patch\n*** Update File: cfg.py\n@@ DEFAULT = 30\n-DEFAULT = 30\n+DEFAULT = 60\n@@ def load():\n     c = {}\n-    c[1] = 2\n+    c[1] = 3\n*** End Patch",
			want: []Operation{{Kind: OpUpdate, Path: "cfg.py", Line: 2, Hunks: []Hunk{
				{Hint: "DEFAULT = 30", Line: 3, Lines: []HunkLine{{Remove, "DEFAULT = 30"}, {Insert, "DEFAULT = 60"}}},
				{Hint: "def load():", Line: 6, Lines: []HunkLine{{Context, "    c = {}"}, {Remove, "    c[1] = 2"}, {Insert, "    c[1] = 3"}}},
			}}},
		},
		{
			name:  "update with move, end of file and bare @@",
			patch: "*** Begin Patch\n*** Update File: old.py\n*** Move to: new.py\n@@\n import os\n-import a\n+import b\n*** End of File\n*** End Patch",
			want: []Operation{{Kind: OpUpdate, Path: "old.py", MoveTo: "new.py", Line: 2, Hunks: []Hunk{
				{Line: 4, EndOfFile: true, Lines: []HunkLine{{Context, "import os"}, {Remove, "import a"}, {Insert, "import b"}}},
			}}},
		},
		{
			name:  "pure rename",
			patch: "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n*** End Patch",
			want:  []Operation{{Kind: OpUpdate, Path: "a.txt", MoveTo: "b.txt", Line: 2}},
		},
		{
			name:  "first hunk without @@, empty line is blank context",
			patch: "*** Begin Patch\n*** Update File: a.txt\n x\n\n-y\n+z\n*** End Patch",
			want: []Operation{{Kind: OpUpdate, Path: "a.txt", Line: 2, Hunks: []Hunk{
				{Line: 3, Lines: []HunkLine{{Context, "x"}, {Context, ""}, {Remove, "y"}, {Insert, "z"}}},
			}}},
		},
		{
			name:  "unified diff range in hint is dropped",
			patch: "*** Begin Patch\n*** Update File: a.go\n@@ -1,3 +1,3 @@ func main() {\n-a\n+b\n*** End Patch",
			want: []Operation{{Kind: OpUpdate, Path: "a.go", Line: 2, Hunks: []Hunk{
				{Hint: "func main() {", Line: 3, Lines: []HunkLine{{Remove, "a"}, {Insert, "b"}}},
			}}},
		},
		{
			name:  "crlf and heredoc wrapper",
			patch: "<<'EOF'\r\n*** Begin Patch\r\n*** Delete File: x\r\n*** End Patch\r\nEOF\r\n",
			want:  []Operation{{Kind: OpDelete, Path: "x", Line: 3}},
		},
		{
			name:  "several operations",
			patch: "*** Begin Patch\n*** Add File: n.txt\n+hi\n*** Delete File: d.txt\n*** Update File: u.txt\n@@\n-a\n+b\n*** End Patch",
			want: []Operation{
				{Kind: OpAdd, Path: "n.txt", Content: "hi\n", Line: 2},
				{Kind: OpDelete, Path: "d.txt", Line: 4},
				{Kind: OpUpdate, Path: "u.txt", Line: 5, Hunks: []Hunk{{Line: 6, Lines: []HunkLine{{Remove, "a"}, {Insert, "b"}}}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.patch)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(p.Ops, tt.want) {
				t.Errorf("ops:\n got %#v\nwant %#v", p.Ops, tt.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name     string
		patch    string
		line     int
		contains string
	}{
		{"missing begin", "*** Add File: a\n+x\n*** End Patch", 1, "first line"},
		{"missing end", "*** Begin Patch\n*** Add File: a\n+x\n", 3, "last line"},
		{"empty input", "", 1, "first line"},
		{"no operations", "*** Begin Patch\n*** End Patch", 0, "no file operations"},
		{"unknown top-level line", "*** Begin Patch\nhello\n*** End Patch", 2, "unexpected line"},
		{"unknown hunk prefix", "*** Begin Patch\n*** Update File: a\n@@\n x\n?y\n*** End Patch", 5, "must start with ' '"},
		{"unknown marker in hunk", "*** Begin Patch\n*** Update File: a\n@@\n x\n*** Frobnicate\n*** End Patch", 5, "unknown marker"},
		{"empty hunk", "*** Begin Patch\n*** Update File: a\n@@ foo\n@@ bar\n-x\n*** End Patch", 3, "hunk 1 is empty"},
		{"empty last hunk", "*** Begin Patch\n*** Update File: a\n@@\n-x\n@@\n*** End Patch", 5, "hunk 2 is empty"},
		{"update without hunks", "*** Begin Patch\n*** Update File: a\n*** End Patch", 2, "has no hunks"},
		{"add line without plus", "*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch", 4, "must start with '+'"},
		{"missing path", "*** Begin Patch\n*** Delete File: \n*** End Patch", 2, "needs a file path"},
		{"end of file before lines", "*** Begin Patch\n*** Update File: a\n@@\n*** End of File\n*** End Patch", 4, "must follow"},
		{"lines after end of file", "*** Begin Patch\n*** Update File: a\n@@\n-x\n*** End of File\n+y\n*** End Patch", 6, "new hunk"},
		{"move not after header", "*** Begin Patch\n*** Update File: a\n@@\n-x\n*** Move to: b\n*** End Patch", 5, "right after"},
		{"nul in path", "*** Begin Patch\n*** Delete File: a\x00b\n*** End Patch", 2, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.patch)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse error = %v, want *ParseError", err)
			}
			if pe.Line != tt.line {
				t.Errorf("line = %d, want %d (%v)", pe.Line, tt.line, err)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not contain %q", err, tt.contains)
			}
		})
	}
}
