package patch

import (
	"errors"
	"maps"
	"path"
	"reflect"
	"strings"
	"testing"
)

var seedPatches = []string{
	wrap("*** Add File: a.txt\n+hello\n+world\n"),
	wrap("*** Delete File: a.txt\n"),
	wrap("*** Update File: a.txt\n@@ def main():\n context\n-old\n+new\n*** End of File\n"),
	wrap("*** Update File: a.txt\n*** Move to: b.txt\n@@\n-x\n+y\n@@ later\n z\n+w\n"),
	wrap("*** Update File: a.txt\n x\n\n-y\n"),
	"<<'EOF'\n" + wrap("*** Delete File: x\n") + "EOF\n",
	"*** Begin Patch\r\n*** Update File: a.txt\r\n@@ -1,2 +1,2 @@\r\n-a\r\n+b\r\n*** End Patch",
	"*** Begin Patch\n*** Update File: a.txt\n@@\n*** End Patch",
	"*** Begin Patch\n*** Frob\n*** End Patch",
	"",
}

// FuzzParse checks that Parse never panics, that what it accepts is well
// formed, and that formatting a parsed patch parses to the same operations.
func FuzzParse(f *testing.F) {
	for _, s := range seedPatches {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse(text)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse error %T is not a *ParseError: %v", err, err)
			}
			return
		}
		if len(p.Ops) == 0 {
			t.Fatal("Parse accepted a patch without operations")
		}
		for _, op := range p.Ops {
			if op.Path == "" || op.Path != path.Clean(op.Path) {
				t.Fatalf("bad path %q", op.Path)
			}
			if op.Kind == OpUpdate && len(op.Hunks) == 0 && op.MoveTo == "" {
				t.Fatalf("update of %q without hunks or move", op.Path)
			}
			for _, h := range op.Hunks {
				if len(h.Lines) == 0 {
					t.Fatalf("empty hunk in %q", op.Path)
				}
				for _, l := range h.Lines {
					if l.Kind != Context && l.Kind != Remove && l.Kind != Insert {
						t.Fatalf("bad line kind %q", l.Kind)
					}
				}
			}
		}
		again, err := Parse(p.String())
		if err != nil {
			t.Fatalf("formatted patch does not parse: %v\n%s", err, p.String())
		}
		if !reflect.DeepEqual(stripLines(p.Ops), stripLines(again.Ops)) {
			t.Fatalf("round trip changed the patch:\n first %#v\nsecond %#v", p.Ops, again.Ops)
		}
	})
}

func stripLines(ops []Operation) []Operation {
	out := make([]Operation, len(ops))
	for i, op := range ops {
		op.Line = 0
		hunks := make([]Hunk, len(op.Hunks))
		for j, h := range op.Hunks {
			h.Line = 0
			hunks[j] = h
		}
		op.Hunks = hunks
		out[i] = op
	}
	return out
}

// FuzzApply checks that Apply never panics, that a failing patch changes
// nothing, and that a successful single update keeps the line accounting.
func FuzzApply(f *testing.F) {
	files := []string{"one\ntwo\nthree\n", "x\ny\nx\ny\n", "a\r\nb\r\n", "no newline", ""}
	for i, s := range seedPatches {
		f.Add(files[i%len(files)], s)
	}
	f.Add("def main():\n    return 0\n", wrap("*** Update File: a.txt\n@@ def main():\n-    return 0\n+    return 1\n"))
	f.Add("\u201cq\u201d\n", wrap("*** Update File: a.txt\n@@\n-\"q\"\n+q\n"))
	f.Fuzz(func(t *testing.T, content, text string) {
		p, err := Parse(text)
		if err != nil {
			return
		}
		base := map[string]string{"a.txt": content, "b.txt": "b\n"}
		store := newMemStore(base)
		res, err := Apply(t.Context(), store, p)
		if err != nil {
			if !maps.Equal(store.files, base) {
				t.Fatalf("failed patch changed files: %v\n%q", err, store.files)
			}
			return
		}
		if len(res.Changes) != len(p.Ops) {
			t.Fatalf("%d changes for %d operations", len(res.Changes), len(p.Ops))
		}
		if len(p.Ops) == 1 && p.Ops[0].Kind == OpUpdate && p.Ops[0].Path == "a.txt" && p.Ops[0].MoveTo == "" {
			c := res.Changes[0]
			before, after := countLines(strings.ReplaceAll(content, "\r\n", "\n")), countLines(strings.ReplaceAll(store.files["a.txt"], "\r\n", "\n"))
			if after != before+c.Added-c.Removed {
				t.Fatalf("line accounting: %d lines before, %d after, +%d -%d\nbefore %q\nafter %q",
					before, after, c.Added, c.Removed, content, store.files["a.txt"])
			}
		}
	})
}
