package loop_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
)

// TestEditToolsRunUnderFileToolTimeout: edit_file and apply_patch match
// text in the manager's process, so a call is bounded by FileToolTimeout
// like the other file tools; the file is left unchanged.
func TestEditToolsRunUnderFileToolTimeout(t *testing.T) {
	tests := []struct {
		name string
		p    loop.Profile
		args map[string]string
	}{
		{"edit_file", profile.Gemini("gemini-2.5-pro"), map[string]string{"file_path": "f.txt", "old_string": "hello", "new_string": "bye"}},
		{"apply_patch", profile.OpenAI("gpt-5.2-codex"),
			map[string]string{"patch": "*** Begin Patch\n*** Update File: f.txt\n@@\n-hello\n+bye\n*** End Patch\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, dir := newEnv(t)
			looptestWrite(t, dir, "f.txt", "hello\n")
			cfg := loop.DefaultConfig()
			cfg.Limits.FileToolTimeout = 1 // 1 ns: expired before the tool starts
			s := newSession(t, tc.p, env, script(tools(call(tc.name, tc.args)), text("done")), loop.WithConfig(cfg))
			if err := s.Submit(t.Context(), "go"); err != nil {
				t.Fatal(err)
			}
			res := lastResults(t, s)
			if !res[0].IsError || !strings.Contains(res[0].Content, tc.name+" did not finish within") {
				t.Errorf("result %q, want a timeout error", res[0].Content)
			}
			if got, err := os.ReadFile(filepath.Join(dir, "f.txt")); err != nil || string(got) != "hello\n" {
				t.Errorf("f.txt = %q (%v), want it unchanged", got, err)
			}
			_ = s.Close()
		})
	}
}
