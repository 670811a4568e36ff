package builtin

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// snapshot returns every regular file under dir (relative path -> content).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApplyPatch(t *testing.T) {
	base := map[string]string{
		"src/main.py": "def main():\n    print(\"Hello\")\n    return 0\n",
		"old.py":      "import os\nimport sys\nimport old_dep\n",
		"gone.txt":    "bye\n",
		"dup.txt":     "x\ny\nx\ny\n",
	}
	tests := []struct {
		name    string
		patch   string
		isError bool
		has     []string
		want    map[string]string // full tree afterwards; nil means unchanged
	}{
		{
			name: "add, update, move and delete",
			patch: "*** Begin Patch\n*** Add File: src/helpers.py\n+def greet(name):\n+    return name\n" +
				"*** Update File: src/main.py\n@@ def main():\n     print(\"Hello\")\n-    return 0\n+    print(\"World\")\n+    return 1\n" +
				"*** Update File: old.py\n*** Move to: new.py\n@@ import os\n import sys\n-import old_dep\n+import new_dep\n" +
				"*** Delete File: gone.txt\n*** End Patch",
			has: []string{"Success. Updated the following files:\nA src/helpers.py\nM src/main.py\nM old.py -> new.py\nD gone.txt\n"},
			want: map[string]string{
				"src/helpers.py": "def greet(name):\n    return name\n",
				"src/main.py":    "def main():\n    print(\"Hello\")\n    print(\"World\")\n    return 1\n",
				"new.py":         "import os\nimport sys\nimport new_dep\n",
				"dup.txt":        "x\ny\nx\ny\n",
			},
		},
		{
			name:  "fuzzy match is reported",
			patch: "*** Begin Patch\n*** Update File: src/main.py\n@@\n-  def main():\n+def start():\n*** End Patch",
			has:   []string{"M src/main.py", "matched ignoring whitespace"},
			want: map[string]string{
				"src/main.py": "def start():\n    print(\"Hello\")\n    return 0\n",
				"old.py":      base["old.py"], "gone.txt": base["gone.txt"], "dup.txt": base["dup.txt"],
			},
		},
		{
			name:    "failing later hunk changes nothing",
			patch:   "*** Begin Patch\n*** Add File: new.txt\n+n\n*** Delete File: gone.txt\n*** Update File: src/main.py\n@@\n-    return 42\n+    return 0\n*** End Patch",
			isError: true, has: []string{"Update File src/main.py, hunk 1", "could not find the expected lines", "No files were changed"},
		},
		{
			name:    "ambiguous context",
			patch:   "*** Begin Patch\n*** Update File: dup.txt\n@@\n x\n-y\n+z\n*** End Patch",
			isError: true, has: []string{"dup.txt", "more than one place"},
		},
		{
			name:    "update of missing file",
			patch:   "*** Begin Patch\n*** Update File: nope.py\n@@\n-a\n+b\n*** End Patch",
			isError: true, has: []string{"nope.py", "does not exist"},
		},
		{
			name:    "path escaping the workspace",
			patch:   "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: ../escape.txt\n+bad\n*** End Patch",
			isError: true, has: []string{"../escape.txt", "escapes the workspace", "No files were changed. Paths must be inside the workspace"},
		},
		{
			name:    "parse error",
			patch:   "*** Update File: x\n",
			isError: true, has: []string{"invalid patch: line 1", "*** Begin Patch", "No files were changed"},
		},
		{
			name:    "empty patch",
			patch:   "",
			isError: true, has: []string{`"patch" parameter is required`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, dir := newEnv(t)
			writeFiles(t, dir, base)
			res, _ := call{env: env}.run(t, ApplyPatch(OpenAI), map[string]any{"patch": tt.patch})
			expect(t, res, tt.isError, tt.has...)
			want := tt.want
			if want == nil {
				want = base
			}
			if got := snapshot(t, dir); !maps.Equal(got, want) {
				t.Errorf("files:\n got %q\nwant %q", got, want)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.txt")); !os.IsNotExist(err) {
				t.Errorf("file written outside the workspace")
			}
		})
	}
}

func TestApplyPatchTooLarge(t *testing.T) {
	env, dir := newEnv(t)
	big := "*** Begin Patch\n*** Add File: big.txt\n" + strings.Repeat("+xxxxxxxxxxxxxxx\n", MaxPatchBytes/16+1) + "*** End Patch"
	res, _ := call{env: env}.run(t, ApplyPatch(OpenAI), map[string]any{"patch": big})
	expect(t, res, true, fmt.Sprintf("at most %d bytes", MaxPatchBytes))
	if got := snapshot(t, dir); len(got) != 0 {
		t.Errorf("files written: %v", got)
	}
}
