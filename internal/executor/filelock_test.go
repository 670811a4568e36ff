package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/builtin"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestConcurrentEditsOfOneFileNeverLoseAnUpdate runs 20 concurrent edit_file
// calls on different lines of one file through the real executor: every
// call that reports success has its change in the file, and every call
// whose change is missing reported an error saying why.
func TestConcurrentEditsOfOneFileNeverLoseAnUpdate(t *testing.T) {
	const n = 20
	tests := []struct {
		name string
		// views returns the read tracking of caller i: shared (one session's
		// round, or subagents sharing the workspace), separate, or none.
		views   func(shared tool.FileViews, i int) tool.FileViews
		variant builtin.Variant
		readFor bool // each caller reads the file first
		allLand bool // every edit must succeed
	}{
		{"one round of one session", func(s tool.FileViews, _ int) tool.FileViews { return s }, builtin.Gemini, false, true},
		{"one round, each edit after a read (Anthropic)", func(s tool.FileViews, _ int) tool.FileViews { return s }, builtin.Anthropic, true, true},
		{"separate sessions without shared views", func(tool.FileViews, int) tool.FileViews { return nil }, builtin.Gemini, false, false},
		{"separate sessions, each after its own read", func(tool.FileViews, int) tool.FileViews { return tool.NewViews() }, builtin.Anthropic, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, ServeOptions{})
			c := newClient(t, s)
			var lines []string
			for i := range n {
				lines = append(lines, fmt.Sprintf("line %02d", i))
			}
			path := filepath.Join(s.root, "shared.txt")
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			shared := tool.NewViews()
			views := make([]tool.FileViews, n)
			for i := range n {
				views[i] = tc.views(shared, i)
				if tc.readFor {
					res := runTool(t, builtin.ReadFile(tc.variant), c, views[i], map[string]any{"file_path": "shared.txt"})
					if res.IsError {
						t.Fatalf("read: %s", res.Output)
					}
				}
			}
			results := make([]tool.Result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					results[i] = runTool(t, builtin.EditFile(tc.variant), c, views[i], map[string]any{
						"file_path": "shared.txt", "old_string": lines[i], "new_string": strings.ToUpper(lines[i]),
					})
				})
			}
			wg.Wait()
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			landed := 0
			for i, r := range results {
				in := strings.Contains(string(got), strings.ToUpper(lines[i]))
				switch {
				case !r.IsError && !in:
					t.Errorf("edit %d reported success but its change is not in the file: %s", i, r.Output)
				case r.IsError && in:
					t.Errorf("edit %d reported an error but its change is in the file: %s", i, r.Output)
				case r.IsError && !strings.Contains(r.Output, "StaleFile"):
					t.Errorf("edit %d failed without saying the file changed: %s", i, r.Output)
				case !r.IsError:
					landed++
				}
			}
			if tc.allLand && landed != n {
				t.Errorf("%d of %d edits landed, want all", landed, n)
			}
			if landed == 0 {
				t.Error("no edit landed")
			}
		})
	}
}

func runTool(t *testing.T, reg tool.Registered, env tool.ExecutionEnvironment, views tool.FileViews, args any) tool.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Error(err)
		return tool.Result{}
	}
	inv := &tool.Invocation{CallID: "c", Name: reg.Definition.Name, Arguments: raw, Env: env, Files: views, Output: func(string) {}}
	res, err := reg.Executor(t.Context(), inv)
	if err != nil {
		t.Errorf("%s: %v", reg.Definition.Name, err)
	}
	return res
}
