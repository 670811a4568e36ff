package patch

import (
	"maps"
	"strings"
	"testing"
)

// TestReferenceBehaviour transcribes, in our own words, the behaviours of
// the apply_patch implementation OpenAI's models were trained against
// (openai/codex, codex-rs/apply-patch: its parser, seek_sequence and test
// scenarios), plus the cases where we deliberately differ
// (docs/spec-deviations.md): those expect an error the model can act on and
// no change to any file.
func TestReferenceBehaviour(t *testing.T) {
	type files = map[string]string
	tests := []struct {
		name    string
		before  files
		patch   string
		after   files  // nil: an error is expected and nothing changes
		errPart string // expected in the error
	}{
		{"add file creates it", files{}, wrap("*** Add File: a.txt\n+one\n+two\n"), files{"a.txt": "one\ntwo\n"}, ""},
		{"add file in a new directory", files{}, wrap("*** Add File: d/e/f.txt\n+x\n"), files{"d/e/f.txt": "x\n"}, ""},
		{"add file with an empty line", files{}, wrap("*** Add File: a.txt\n+one\n+\n+three\n"), files{"a.txt": "one\n\nthree\n"}, ""},
		{"delete file", files{"gone.txt": "x\n", "keep.txt": "k\n"}, wrap("*** Delete File: gone.txt\n"), files{"keep.txt": "k\n"}, ""},
		{"update replaces a line", files{"f.txt": "a\nb\nc\n"}, wrap("*** Update File: f.txt\n@@\n a\n-b\n+B\n c\n"), files{"f.txt": "a\nB\nc\n"}, ""},
		{"several operations in one patch", files{"m.txt": "line1\nline2\n", "d.txt": "x\n"},
			wrap("*** Add File: n/new.txt\n+created\n*** Delete File: d.txt\n*** Update File: m.txt\n@@\n-line2\n+changed\n"),
			files{"m.txt": "line1\nchanged\n", "n/new.txt": "created\n"}, ""},
		{"two chunks in one file", files{"f.txt": "1\n2\n3\n4\n5\n6\n7\n8\n"},
			wrap("*** Update File: f.txt\n@@\n 1\n-2\n+two\n 3\n@@\n 6\n-7\n+seven\n 8\n"),
			files{"f.txt": "1\ntwo\n3\n4\n5\n6\nseven\n8\n"}, ""},
		{"move to a new directory", files{"old/name.txt": "old content\n", "old/other.txt": "o\n"},
			wrap("*** Update File: old/name.txt\n*** Move to: renamed/dir/name.txt\n@@\n-old content\n+new content\n"),
			files{"renamed/dir/name.txt": "new content\n", "old/other.txt": "o\n"}, ""},
		{"pure addition chunk appends at the end", files{"f.txt": "line1\nline2\n"},
			wrap("*** Update File: f.txt\n@@\n+added line 1\n+added line 2\n"),
			files{"f.txt": "line1\nline2\nadded line 1\nadded line 2\n"}, ""},
		{"indented Update header", files{"foo.txt": "old\n"}, wrap("  *** Update File: foo.txt\n@@\n-old\n+new\n"), files{"foo.txt": "new\n"}, ""},
		{"indented header after an Add File", files{"a.txt": "a\n"},
			wrap("*** Add File: c.txt\n+c\n  *** Update File: a.txt\n@@\n-a\n+b\n"),
			files{"a.txt": "b\n", "c.txt": "c\n"}, ""},
		{"padded Begin and End markers", files{"file.txt": "one\n"},
			"*** Begin Patch \n*** Update File: file.txt\n@@\n-one\n+two\n *** End Patch\n", files{"file.txt": "two\n"}, ""},
		{"unicode lines updated exactly", files{"foo.txt": "héllo wörld\nçà ça\n"},
			wrap("*** Update File: foo.txt\n@@\n-héllo wörld\n+grüß gott\n çà ça\n"), files{"foo.txt": "grüß gott\nçà ça\n"}, ""},
		{"deletion-only hunk", files{"lines.txt": "keep\ndrop1\ndrop2\nkeep2\n"},
			wrap("*** Update File: lines.txt\n@@\n keep\n-drop1\n-drop2\n keep2\n"), files{"lines.txt": "keep\nkeep2\n"}, ""},
		{"End of File marker anchors the hunk at the end", files{"tail.txt": "x\nend\nx\nend\n"},
			wrap("*** Update File: tail.txt\n@@\n x\n-end\n+END\n*** End of File\n"), files{"tail.txt": "x\nend\nx\nEND\n"}, ""},
		{"blank line after End of File", files{"t.txt": "a\nb\n"},
			wrap("*** Update File: t.txt\n@@\n a\n-b\n+c\n*** End of File\n\n"), files{"t.txt": "a\nc\n"}, ""},
		{"blank line after End of File before the next operation", files{"t.txt": "a\nb\n"},
			wrap("*** Update File: t.txt\n@@\n-b\n+c\n*** End of File\n\n*** Add File: u.txt\n+u\n"), files{"t.txt": "a\nc\n", "u.txt": "u\n"}, ""},
		{"addition-only hunk followed by a hunk earlier in the file", files{"f.txt": "first\nsecond\nthird\n"},
			wrap("*** Update File: f.txt\n@@\n+appended\n@@\n-first\n+FIRST\n"), files{"f.txt": "FIRST\nsecond\nthird\nappended\n"}, ""},
		{"mixed line endings kept per line", files{"m.txt": "a\r\nb\nc\r\nd\n"},
			wrap("*** Update File: m.txt\n@@\n a\n-b\n+B\n c\n"), files{"m.txt": "a\r\nB\nc\r\nd\n"}, ""},
		{"CRLF file gets CRLF for added lines", files{"w.txt": "one\r\ntwo\r\n"},
			wrap("*** Update File: w.txt\n@@\n one\n+inserted\n two\n"), files{"w.txt": "one\r\ninserted\r\ntwo\r\n"}, ""},
		{"CRLF patch text against an LF file", files{"f.txt": "a\nb\n"},
			strings.ReplaceAll(wrap("*** Update File: f.txt\n@@\n a\n-b\n+c\n"), "\n", "\r\n"), files{"f.txt": "a\nc\n"}, ""},
		{"fuzzy: trailing whitespace in the file", files{"f.py": "x = 1   \ny = 2\n"},
			wrap("*** Update File: f.py\n@@\n x = 1\n-y = 2\n+y = 3\n"), files{"f.py": "x = 1   \ny = 3\n"}, ""},
		{"fuzzy: indentation differs", files{"f.py": "def f():\n\treturn 1\n"},
			wrap("*** Update File: f.py\n@@\n def f():\n-    return 1\n+\treturn 2\n"), files{"f.py": "def f():\n\treturn 2\n"}, ""},
		{"fuzzy: typographic quotes and dashes", files{"f.txt": "say \u201chi\u201d \u2014 now\nend\n"},
			wrap("*** Update File: f.txt\n@@\n-say \"hi\" - now\n+say hello\n end\n"), files{"f.txt": "say hello\nend\n"}, ""},
		{"hint chooses the second of two identical blocks", files{"f.py": "def a():\n    pass\ndef b():\n    pass\n"},
			wrap("*** Update File: f.py\n@@ def b():\n-    pass\n+    return 1\n"), files{"f.py": "def a():\n    pass\ndef b():\n    return 1\n"}, ""},
		{"hunk without a leading @@ line", files{"f.py": "import foo\n"}, wrap("*** Update File: f.py\n import foo\n+bar\n"), files{"f.py": "import foo\nbar\n"}, ""},
		{"heredoc around the patch", files{"f.txt": "a\n"}, "<<'EOF'\n" + wrap("*** Update File: f.txt\n@@\n-a\n+b\n") + "EOF\n", files{"f.txt": "b\n"}, ""},
		{"trailing blank context line the file lacks", files{"f.txt": "a\nb\n"},
			wrap("*** Update File: f.txt\n@@\n a\n-b\n+c\n \n"), files{"f.txt": "a\nc\n"}, ""},
		{"move with a content change keeps other lines", files{"a.go": "package a\nvar x = 1\n"},
			wrap("*** Update File: a.go\n*** Move to: b.go\n@@\n package a\n-var x = 1\n+var x = 2\n"), files{"b.go": "package a\nvar x = 2\n"}, ""},
		{"changed last line gains a final newline", files{"n.txt": "a\nb"},
			wrap("*** Update File: n.txt\n@@\n a\n-b\n+c\n"), files{"n.txt": "a\nc\n"}, ""},
		{"untouched unterminated last line stays unterminated", files{"n.txt": "a\nb\nc"},
			wrap("*** Update File: n.txt\n@@\n-a\n+A\n b\n"), files{"n.txt": "A\nb\nc"}, ""},
		{"addition after an unterminated last line", files{"n.txt": "a\nb"},
			wrap("*** Update File: n.txt\n@@\n+c\n"), files{"n.txt": "a\nb\nc\n"}, ""},
		{"blank line inside a hunk is an empty context line", files{"f.txt": "a\n\nb\n"},
			wrap("*** Update File: f.txt\n@@\n a\n\n-b\n+c\n"), files{"f.txt": "a\n\nc\n"}, ""},
		{"unified-diff range header is tolerated", files{"f.txt": "a\nb\n"},
			wrap("*** Update File: f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"), files{"f.txt": "a\nc\n"}, ""},

		// Errors the reference reports too.
		{"rejects an empty patch", files{"foo.txt": "x\n"}, wrap(""), nil, "no file operations"},
		{"rejects missing context", files{"modify.txt": "line1\nline2\n"},
			wrap("*** Update File: modify.txt\n@@\n-missing\n+changed\n"), nil, "could not find the expected lines"},
		{"rejects deleting a missing file", files{"foo.txt": "x\n"}, wrap("*** Delete File: missing.txt\n"), nil, "does not exist"},
		{"rejects an update without hunks", files{"foo.txt": "x\n"}, wrap("*** Update File: foo.txt\n"), nil, "has no hunks"},
		{"rejects an update of a missing file", files{"foo.txt": "x\n"}, wrap("*** Update File: missing.txt\n@@\n-a\n+b\n"), nil, "does not exist"},
		{"rejects an unknown header", files{"foo.txt": "x\n"}, wrap("*** Frobnicate File: foo.txt\n"), nil, "unexpected line"},
		{"rejects a line without a prefix in a hunk", files{"foo.txt": "x\n"}, wrap("*** Update File: foo.txt\n@@\n-x\nbare\n"), nil, "must start with"},
		{"rejects ambiguous context", files{"f.txt": "x\ny\nx\ny\n"}, wrap("*** Update File: f.txt\n@@\n-x\n+z\n y\n"), nil, "more than one place"},
		{"End of File hunk must match at the end", files{"f.txt": "a\nb\nc\n"},
			wrap("*** Update File: f.txt\n@@\n-a\n+A\n*** End of File\n"), nil, "at the end of the file"},
		{"hunks out of order", files{"f.txt": "1\n2\n3\n"}, wrap("*** Update File: f.txt\n@@\n-3\n+three\n@@\n-1\n+one\n"), nil, "hunks must be in file order"},

		// Deliberate differences (docs/spec-deviations.md).
		{"add onto an existing file is refused", files{"dup.txt": "original\n"}, wrap("*** Add File: dup.txt\n+new\n"), nil, "already exists"},
		{"move onto an existing file is refused", files{"a.txt": "a\n", "b.txt": "b\n"},
			wrap("*** Update File: a.txt\n*** Move to: b.txt\n@@\n-a\n+A\n"), nil, "already exists"},
		{"a failure leaves no partial success", files{},
			wrap("*** Add File: created.txt\n+hello\n*** Update File: missing.txt\n@@\n-old\n+new\n"), nil, "does not exist"},
	}
	if len(tests) < 40 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemStore(tc.before)
			_, err := ApplyText(t.Context(), store, tc.patch)
			if tc.after == nil {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errPart)
				}
				if !maps.Equal(store.files, tc.before) {
					t.Errorf("files changed by a failed patch: %q", store.files)
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyText: %v", err)
			}
			if !maps.Equal(store.files, tc.after) {
				t.Errorf("files = %q\nwant    %q", store.files, tc.after)
			}
		})
	}
}
