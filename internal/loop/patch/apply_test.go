package patch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
)

// memStore is an in-memory Store. failWrite/failDelete make the named path
// fail, to exercise rollback.
type memStore struct {
	files      map[string]string
	failWrite  string
	failDelete string
	writes     int
}

func newMemStore(files map[string]string) *memStore {
	m := &memStore{files: map[string]string{}}
	maps.Copy(m.files, files)
	return m
}

func (m *memStore) Read(_ context.Context, p string) ([]byte, error) {
	c, ok := m.files[p]
	if !ok {
		return nil, fmt.Errorf("read %s: not found", p)
	}
	return []byte(c), nil
}

func (m *memStore) Write(_ context.Context, p string, data []byte) error {
	if p == m.failWrite {
		return errors.New("disk full")
	}
	m.writes++
	m.files[p] = string(data)
	return nil
}

func (m *memStore) Delete(_ context.Context, p string) error {
	if p == m.failDelete {
		return errors.New("permission denied")
	}
	if _, ok := m.files[p]; !ok {
		return fmt.Errorf("delete %s: not found", p)
	}
	delete(m.files, p)
	return nil
}

func (m *memStore) Exists(_ context.Context, p string) (bool, error) {
	_, ok := m.files[p]
	return ok, nil
}

func wrap(body string) string { return "*** Begin Patch\n" + body + "*** End Patch\n" }

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		patch   string
		want    map[string]string
		changes []FileChange
	}{
		{
			name:    "add file",
			files:   map[string]string{},
			patch:   wrap("*** Add File: src/h.py\n+def greet(name):\n+    return name\n"),
			want:    map[string]string{"src/h.py": "def greet(name):\n    return name\n"},
			changes: []FileChange{{Kind: OpAdd, Path: "src/h.py", Added: 2}},
		},
		{
			name:    "delete file",
			files:   map[string]string{"old.py": "x\ny\n", "keep": "k\n"},
			patch:   wrap("*** Delete File: old.py\n"),
			want:    map[string]string{"keep": "k\n"},
			changes: []FileChange{{Kind: OpDelete, Path: "old.py", Removed: 2}},
		},
		{
			name:    "update single hunk",
			files:   map[string]string{"m.py": "def main():\n    print(\"Hello\")\n    return 0\n"},
			patch:   wrap("*** Update File: m.py\n@@ def main():\n     print(\"Hello\")\n-    return 0\n+    print(\"World\")\n+    return 1\n"),
			want:    map[string]string{"m.py": "def main():\n    print(\"Hello\")\n    print(\"World\")\n    return 1\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "m.py", Hunks: 1, Added: 2, Removed: 1}},
		},
		{
			name:  "update two hunks in order",
			files: map[string]string{"c.py": "DEFAULT_TIMEOUT = 30\n\ndef load_config():\n    config = {}\n    config[\"debug\"] = False\n    return config\n"},
			patch: wrap("*** Update File: c.py\n@@ DEFAULT_TIMEOUT = 30\n-DEFAULT_TIMEOUT = 30\n+DEFAULT_TIMEOUT = 60\n" +
				"@@ def load_config():\n     config = {}\n-    config[\"debug\"] = False\n+    config[\"debug\"] = True\n"),
			want:    map[string]string{"c.py": "DEFAULT_TIMEOUT = 60\n\ndef load_config():\n    config = {}\n    config[\"debug\"] = True\n    return config\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "c.py", Hunks: 2, Added: 2, Removed: 2}},
		},
		{
			name:    "update and move",
			files:   map[string]string{"old_name.py": "import os\nimport sys\nimport old_dep\n"},
			patch:   wrap("*** Update File: old_name.py\n*** Move to: new_name.py\n@@ import os\n import sys\n-import old_dep\n+import new_dep\n"),
			want:    map[string]string{"new_name.py": "import os\nimport sys\nimport new_dep\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "old_name.py", MovedTo: "new_name.py", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:    "pure rename",
			files:   map[string]string{"a.txt": "same\n"},
			patch:   wrap("*** Update File: a.txt\n*** Move to: dir/b.txt\n"),
			want:    map[string]string{"dir/b.txt": "same\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "a.txt", MovedTo: "dir/b.txt"}},
		},
		{
			name:    "hint selects among repeated lines",
			files:   map[string]string{"r.go": "func a() {\n\treturn 1\n}\n\nfunc b() {\n\treturn 1\n}\n"},
			patch:   wrap("*** Update File: r.go\n@@ func b() {\n-\treturn 1\n+\treturn 2\n"),
			want:    map[string]string{"r.go": "func a() {\n\treturn 1\n}\n\nfunc b() {\n\treturn 2\n}\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "r.go", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:    "partial hint matches a longer line",
			files:   map[string]string{"k.py": "class Foo(Base):\n    x = 1\nclass Bar(Base):\n    x = 1\n"},
			patch:   wrap("*** Update File: k.py\n@@ class Bar\n-    x = 1\n+    x = 2\n"),
			want:    map[string]string{"k.py": "class Foo(Base):\n    x = 1\nclass Bar(Base):\n    x = 2\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "k.py", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:    "end of file marker matches the last lines",
			files:   map[string]string{"e.txt": "x\nend\nx\nend\n"},
			patch:   wrap("*** Update File: e.txt\n@@\n x\n-end\n+END\n*** End of File\n"),
			want:    map[string]string{"e.txt": "x\nend\nx\nEND\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "e.txt", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:    "addition with hint inserts after the hint line",
			files:   map[string]string{"i.py": "import os\n\ndef f():\n    pass\n"},
			patch:   wrap("*** Update File: i.py\n@@ import os\n+import sys\n"),
			want:    map[string]string{"i.py": "import os\nimport sys\n\ndef f():\n    pass\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "i.py", Hunks: 1, Added: 1}},
		},
		{
			name:    "addition without hint appends",
			files:   map[string]string{"l.txt": "a\n"},
			patch:   wrap("*** Update File: l.txt\n@@\n+b\n"),
			want:    map[string]string{"l.txt": "a\nb\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "l.txt", Hunks: 1, Added: 1}},
		},
		{
			name:    "trailing whitespace fuzz keeps the file's context lines",
			files:   map[string]string{"w.txt": "keep  \nold\t\n"},
			patch:   wrap("*** Update File: w.txt\n@@\n keep\n-old\n+new\n"),
			want:    map[string]string{"w.txt": "keep  \nnew\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "w.txt", Hunks: 1, Fuzz: FuzzTrailingWhitespace, Added: 1, Removed: 1}},
		},
		{
			name:    "whitespace fuzz",
			files:   map[string]string{"w.txt": "\tif  x {\n\t\ty()\n\t}\n"},
			patch:   wrap("*** Update File: w.txt\n@@\n  if x {\n-    y()\n+\t\tz()\n"),
			want:    map[string]string{"w.txt": "\tif  x {\n\t\tz()\n\t}\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "w.txt", Hunks: 1, Fuzz: FuzzWhitespace, Added: 1, Removed: 1}},
		},
		{
			name:    "unicode punctuation fuzz",
			files:   map[string]string{"u.py": "msg = \u201cit\u2019s done\u201d  \u2014 ok\u00a0now\n"},
			patch:   wrap("*** Update File: u.py\n@@\n-msg = \"it's done\" - ok now\n+msg = \"done\"\n"),
			want:    map[string]string{"u.py": "msg = \"done\"\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "u.py", Hunks: 1, Fuzz: FuzzUnicode, Added: 1, Removed: 1}},
		},
		{
			name:    "crlf file keeps crlf",
			files:   map[string]string{"w.bat": "a\r\nb\r\n"},
			patch:   wrap("*** Update File: w.bat\n@@\n a\n-b\n+c\n"),
			want:    map[string]string{"w.bat": "a\r\nc\r\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "w.bat", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:    "missing final newline is kept",
			files:   map[string]string{"n.txt": "a\nb"},
			patch:   wrap("*** Update File: n.txt\n@@\n-a\n+A\n"),
			want:    map[string]string{"n.txt": "A\nb"},
			changes: []FileChange{{Kind: OpUpdate, Path: "n.txt", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:    "trailing blank context line the file lacks",
			files:   map[string]string{"t.txt": "a\nb\n"},
			patch:   wrap("*** Update File: t.txt\n@@\n a\n-b\n+c\n \n"),
			want:    map[string]string{"t.txt": "a\nc\n"},
			changes: []FileChange{{Kind: OpUpdate, Path: "t.txt", Hunks: 1, Added: 1, Removed: 1}},
		},
		{
			name:  "operations see earlier operations of the same patch",
			files: map[string]string{"d.txt": "gone\n"},
			patch: wrap("*** Add File: n.txt\n+one\n*** Update File: n.txt\n@@\n-one\n+two\n*** Delete File: d.txt\n*** Add File: d.txt\n+back\n"),
			want:  map[string]string{"n.txt": "two\n", "d.txt": "back\n"},
			changes: []FileChange{
				{Kind: OpAdd, Path: "n.txt", Added: 1},
				{Kind: OpUpdate, Path: "n.txt", Hunks: 1, Added: 1, Removed: 1},
				{Kind: OpDelete, Path: "d.txt", Removed: 1},
				{Kind: OpAdd, Path: "d.txt", Added: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.files)
			res, err := ApplyText(t.Context(), store, tt.patch)
			if err != nil {
				t.Fatalf("ApplyText: %v", err)
			}
			if !maps.Equal(store.files, tt.want) {
				t.Errorf("files:\n got %q\nwant %q", store.files, tt.want)
			}
			if fmt.Sprint(res.Changes) != fmt.Sprint(tt.changes) {
				t.Errorf("changes:\n got %+v\nwant %+v", res.Changes, tt.changes)
			}
		})
	}
}

func TestApplyRejectsAndChangesNothing(t *testing.T) {
	base := map[string]string{
		"a.txt":   "one\ntwo\nthree\n",
		"dup.txt": "x\ny\nx\ny\n",
		"b.txt":   "b\n",
	}
	tests := []struct {
		name     string
		patch    string
		path     string
		hunk     int
		contains string
	}{
		{"update of missing file", wrap("*** Update File: nope.txt\n@@\n-a\n+b\n"), "nope.txt", 0, "does not exist"},
		{"add of existing file", wrap("*** Add File: a.txt\n+x\n"), "a.txt", 0, "already exists"},
		{"delete of missing file", wrap("*** Delete File: nope.txt\n"), "nope.txt", 0, "does not exist"},
		{"context not found", wrap("*** Update File: a.txt\n@@\n one\n-four\n+4\n"), "a.txt", 1, "could not find the expected lines"},
		{"hint not found", wrap("*** Update File: a.txt\n@@ def nowhere():\n-one\n+1\n"), "a.txt", 1, "context hint"},
		{"ambiguous context", wrap("*** Update File: dup.txt\n@@\n x\n-y\n+z\n"), "dup.txt", 1, "more than one place"},
		{"hunks out of order", wrap("*** Update File: a.txt\n@@\n-three\n+3\n@@\n-one\n+1\n"), "a.txt", 2, "file order"},
		{"end of file marker not at end", wrap("*** Update File: a.txt\n@@\n-one\n+1\n*** End of File\n"), "a.txt", 1, "end of the file"},
		{"move onto existing file", wrap("*** Update File: a.txt\n*** Move to: b.txt\n@@\n-one\n+1\n"), "a.txt", 0, "already exists"},
		{"later operation fails after earlier ones", wrap("*** Add File: new.txt\n+n\n*** Delete File: b.txt\n*** Update File: a.txt\n@@\n-zero\n+0\n"), "a.txt", 1, "could not find"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(base)
			_, err := ApplyText(t.Context(), store, tt.patch)
			var ae *ApplyError
			if !errors.As(err, &ae) {
				t.Fatalf("error = %v, want *ApplyError", err)
			}
			if ae.Path != tt.path || ae.Hunk != tt.hunk {
				t.Errorf("error names %s hunk %d, want %s hunk %d", ae.Path, ae.Hunk, tt.path, tt.hunk)
			}
			if !strings.Contains(err.Error(), tt.contains) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q should contain %q and the path", err, tt.contains)
			}
			if store.writes != 0 || !maps.Equal(store.files, base) {
				t.Errorf("store changed: writes=%d files=%q", store.writes, store.files)
			}
		})
	}
}

func TestApplyRollsBackOnStoreFailure(t *testing.T) {
	base := map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"}
	tests := []struct {
		name       string
		failWrite  string
		failDelete string
	}{
		{"write fails after another write", "b.txt", ""},
		{"delete fails after writes", "", "c.txt"},
	}
	patchText := wrap("*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** Add File: n.txt\n+n\n*** Delete File: c.txt\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(base)
			store.failWrite, store.failDelete = tt.failWrite, tt.failDelete
			_, err := ApplyText(t.Context(), store, patchText)
			if err == nil {
				t.Fatal("ApplyText succeeded, want error")
			}
			if !maps.Equal(store.files, base) {
				t.Errorf("files after rollback = %q, want %q", store.files, base)
			}
		})
	}
}

func TestResultSummary(t *testing.T) {
	r := &Result{Changes: []FileChange{
		{Kind: OpAdd, Path: "a"},
		{Kind: OpUpdate, Path: "b", MovedTo: "c", Fuzz: FuzzWhitespace},
		{Kind: OpDelete, Path: "d"},
	}}
	want := "Success. Updated the following files:\nA a\nM b -> c\nD d\nNote: hunks for b matched ignoring whitespace; check the result.\n"
	if got := r.Summary(); got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

func TestNormalizePunctuation(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"\u201chi\u201d \u2018x\u2019", "\"hi\" 'x'"},
		{"a\u2013b\u2014c\u2212d", "a-b-c-d"},
		{"a\u00a0b\u202fc", "a b c"},
		{"wait\u2026", "wait..."},
	}
	for _, tt := range tests {
		if got := NormalizePunctuation(tt.in); got != tt.want {
			t.Errorf("NormalizePunctuation(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
