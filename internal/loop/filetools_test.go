package loop_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
)

func TestToolBatchLimits(t *testing.T) {
	read := func(id string) scripted.ToolCall {
		c := call("read_file", map[string]string{"file_path": "f.txt"})
		c.ID = id
		return c
	}
	var ten []scripted.ToolCall
	for i := range 10 {
		ten = append(ten, read(fmt.Sprintf("c%d", i)))
	}
	big := call("write_file", map[string]string{"file_path": "big.txt", "content": strings.Repeat("x", 300<<10)})
	big.ID = "big"
	tests := []struct {
		name    string
		calls   []scripted.ToolCall
		cfg     func(*loop.SessionConfig)
		refused map[int]string // call index -> message part
	}{
		{"more calls than the batch limit", ten, nil,
			map[int]string{8: "at most 8 tool calls", 9: "at most 8 tool calls"}},
		{"batch limit raised by the config", ten, func(c *loop.SessionConfig) { c.Limits.MaxToolCallsPerBatch = 10 }, nil},
		{"duplicate call id", []scripted.ToolCall{read("x"), read("y"), read("x")}, nil,
			map[int]string{2: "appears more than once"}},
		{"arguments above the size limit", []scripted.ToolCall{read("a"), big}, nil,
			map[int]string{1: "more than the limit of 262144 bytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, dir := newEnv(t)
			looptestWrite(t, dir, "f.txt", "hello\n")
			cfg := loop.DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s := newSession(t, anthropic(), env, script(tools(tc.calls...), text("done")), loop.WithConfig(cfg))
			rec := record(s)
			if err := s.Submit(t.Context(), "go"); err != nil {
				t.Fatal(err)
			}
			res := lastResults(t, s)
			if len(res) != len(tc.calls) {
				t.Fatalf("%d results for %d calls", len(res), len(tc.calls))
			}
			for i, r := range res {
				want, refused := tc.refused[i]
				switch {
				case refused && (!r.IsError || !strings.Contains(r.Content, want)):
					t.Errorf("call %d: %q, want an error containing %q", i, r.Content, want)
				case !refused && r.IsError:
					t.Errorf("call %d failed: %s", i, r.Content)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "big.txt")); err == nil {
				t.Error("the oversized write_file ran")
			}
			_ = s.Close()
			rec.All(t)
		})
	}
}

func TestFileToolTimeout(t *testing.T) {
	env, dir := newEnv(t)
	looptestWrite(t, dir, "f.txt", "hello\n")
	cfg := loop.DefaultConfig()
	cfg.Limits.FileToolTimeout = 1 // 1 ns: expired before the read starts
	s := newSession(t, anthropic(), env, script(tools(call("read_file", map[string]string{"file_path": "f.txt"})), text("done")), loop.WithConfig(cfg))
	if err := s.Submit(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	res := lastResults(t, s)
	if !res[0].IsError || !strings.Contains(res[0].Content, "read_file did not finish within") {
		t.Errorf("result %q, want a timeout error", res[0].Content)
	}
	_ = s.Close()
}

func TestCredentialPathsDenied(t *testing.T) {
	tests := []struct {
		name    string
		call    scripted.ToolCall
		cfg     func(*loop.SessionConfig)
		isError bool
		want    string
		notWant string
	}{
		{"read .env", call("read_file", map[string]string{"file_path": ".env"}), nil, true, `credential pattern ".env"`, "TOKEN"},
		{"read a key under .ssh", call("read_file", map[string]string{"file_path": "home/.ssh/id_ed25519"}), nil, true, "credential pattern", "PRIVATE"},
		{"write a .pem", call("write_file", map[string]string{"file_path": "certs/server.pem", "content": "x"}), nil, true, `"*.pem"`, ""},
		{"read .env.example (allowed by default)", call("read_file", map[string]string{"file_path": ".env.example"}), nil, false, "TOKEN=changeme", ""},
		{"grep leaves denied files out", call("grep", map[string]string{"pattern": "TOKEN"}), nil, false, ".env.example", "s3cr3t"},
		{"glob leaves denied files out", call("glob", map[string]string{"pattern": "**/*"}), nil, false, "main.go", "server.key"},
		{"operator allows .env for the session", call("read_file", map[string]string{"file_path": ".env"}),
			func(c *loop.SessionConfig) { c.FileAllowPatterns = []string{".env"} }, false, "TOKEN=s3cr3t", ""},
		{"operator denies more", call("read_file", map[string]string{"file_path": "main.go"}),
			func(c *loop.SessionConfig) { c.FileDenyPatterns = []string{"*.go"} }, true, `"*.go"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, dir := newEnv(t)
			if err := os.MkdirAll(filepath.Join(dir, "home", ".ssh"), 0o700); err != nil {
				t.Fatal(err)
			}
			looptestWrite(t, dir, ".env", "TOKEN=s3cr3t\n")
			looptestWrite(t, dir, ".env.example", "TOKEN=changeme\n")
			looptestWrite(t, dir, "home/.ssh/id_ed25519", "PRIVATE KEY\n")
			looptestWrite(t, dir, "main.go", "package main\n")
			looptestWrite(t, dir, "certs/server.key", "TOKEN=s3cr3t\n") // not hidden: searched unless denied
			cfg := loop.DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s := newSession(t, anthropic(), env, script(tools(tc.call), text("done")), loop.WithConfig(cfg))
			if err := s.Submit(t.Context(), "go"); err != nil {
				t.Fatal(err)
			}
			r := lastResults(t, s)[0]
			if r.IsError != tc.isError || !strings.Contains(r.Content, tc.want) {
				t.Errorf("result (error %v) %q, want error %v containing %q", r.IsError, r.Content, tc.isError, tc.want)
			}
			if tc.notWant != "" && strings.Contains(r.Content, tc.notWant) {
				t.Errorf("result leaks %q: %s", tc.notWant, r.Content)
			}
			if _, err := os.Stat(filepath.Join(dir, "certs", "server.pem")); err == nil {
				t.Error("the denied write happened")
			}
			_ = s.Close()
		})
	}
}

// TestFileViewsSurviveRestore: the read tracking is rebuilt from the
// journal, so a restored session refuses a stale edit and allows an edit of
// a file read before the restart.
func TestFileViewsSurviveRestore(t *testing.T) {
	for _, changed := range []bool{false, true} {
		t.Run(map[bool]string{false: "unchanged file", true: "file changed during the restart"}[changed], func(t *testing.T) {
			env, dir := newEnv(t)
			looptestWrite(t, dir, "f.txt", "hello\n")
			j := &memJournal{}
			s := newSession(t, anthropic(), env, script(tools(call("read_file", map[string]string{"file_path": "f.txt"})), text("read")),
				loop.WithJournal(j), loop.WithID("sess"))
			if err := s.Submit(t.Context(), "read it"); err != nil {
				t.Fatal(err)
			}
			events, _ := j.snapshot() // the manager crashes here
			_ = s.Close()
			if changed {
				looptestWrite(t, dir, "f.txt", "hello\nchanged by the user\n")
			}
			edit := call("edit_file", map[string]string{"file_path": "f.txt", "old_string": "hello", "new_string": "bye"})
			// The script is indexed by the assistant turns already in the
			// history: the restored session continues at the edit.
			s2 := newSession(t, anthropic(), env, script(tools(call("read_file", map[string]string{"file_path": "f.txt"})), text("read"), tools(edit), text("done")),
				loop.WithRestore(events), loop.WithJournal(&memJournal{}))
			if err := s2.Submit(t.Context(), "edit it"); err != nil {
				t.Fatal(err)
			}
			r := lastResults(t, s2)[0]
			if r.Name != "edit_file" {
				t.Fatalf("last result is of %s, want edit_file", r.Name)
			}
			if changed {
				if !r.IsError || !strings.Contains(r.Content, "StaleFile") || !strings.Contains(r.Content, "changed since it was last read") {
					t.Errorf("edit after an outside change = %q, want StaleFile", r.Content)
				}
			} else if r.IsError {
				t.Errorf("edit of a file read before the restart failed: %s", r.Content)
			}
			_ = s2.Close()
		})
	}
}

func TestSubagentsShareFileViews(t *testing.T) {
	env, dir := newEnv(t)
	looptestWrite(t, dir, "f.txt", "hello\n")
	// The parent reads the file; its subagent edits it without a read.
	p := profile.Anthropic("claude-sonnet-4-5")
	views := loop.NewFileViews()
	s := newSession(t, p, env, script(tools(call("read_file", map[string]string{"file_path": "f.txt"})), text("read")), loop.WithFileViews(views))
	if err := s.Submit(t.Context(), "read"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	child := newSession(t, p, env, script(tools(call("edit_file", map[string]string{"file_path": "f.txt", "old_string": "hello", "new_string": "bye"})), text("done")),
		loop.WithFileViews(views), loop.WithDepth(1))
	if err := child.Submit(t.Context(), "edit"); err != nil {
		t.Fatal(err)
	}
	if r := lastResults(t, child)[0]; r.IsError {
		t.Errorf("edit by a session sharing the views failed: %s", r.Content)
	}
	_ = child.Close()
}

func looptestWrite(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
