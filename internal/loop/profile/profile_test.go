package profile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

var subagentTools = []string{"spawn_agent", "send_input", "wait", "close_agent"}

func TestToolSets(t *testing.T) {
	tests := []struct {
		p       *profile.Profile
		id      string
		tools   []string
		timeout time.Duration
	}{
		{profile.OpenAI("gpt-5.2-codex"), "openai",
			[]string{"read_file", "apply_patch", "write_file", "shell", "grep", "glob"}, 10 * time.Second},
		{profile.Anthropic("claude-opus-4-6"), "anthropic",
			[]string{"read_file", "write_file", "edit_file", "shell", "grep", "glob"}, 120 * time.Second},
		{profile.Gemini("gemini-3-flash"), "gemini",
			[]string{"read_file", "read_many_files", "write_file", "edit_file", "shell", "grep", "glob", "list_dir"}, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if tt.p.ID() != tt.id {
				t.Errorf("ID() = %q", tt.p.ID())
			}
			want := append(slices.Clone(tt.tools), subagentTools...)
			if got := tt.p.Registry().Names(); !slices.Equal(got, want) {
				t.Errorf("tools %v, want %v", got, want)
			}
			c := tt.p.Capabilities()
			if !c.Reasoning || !c.Streaming || !c.ParallelToolCalls || c.ContextWindow <= 0 || c.DefaultCommandTimeout != tt.timeout {
				t.Errorf("capabilities %+v", c)
			}
		})
	}
	if slices.Contains(profile.Anthropic("claude-sonnet-4-5").Registry().Names(), "apply_patch") {
		t.Error("the anthropic profile must not offer apply_patch")
	}
}

func TestProviderOptions(t *testing.T) {
	var a struct {
		BetaHeaders []string `json:"beta_headers"`
	}
	if err := json.Unmarshal(profile.Anthropic("claude-sonnet-4-5").ProviderOptions()["anthropic"], &a); err != nil || len(a.BetaHeaders) == 0 {
		t.Errorf("anthropic beta headers %v, %v", a.BetaHeaders, err)
	}
	var g struct {
		SafetySettings []map[string]string `json:"safety_settings"`
	}
	if err := json.Unmarshal(profile.Gemini("gemini-2.5-pro").ProviderOptions()["gemini"], &g); err != nil || len(g.SafetySettings) != 4 {
		t.Errorf("gemini safety settings %v, %v", g.SafetySettings, err)
	}
	if profile.OpenAI("gpt-5.2").ProviderOptions() != nil {
		t.Error("openai needs no provider options (reasoning effort travels in the request)")
	}
}

// TestSystemPromptTopics: each base prompt covers identity, tool usage,
// the provider's editing format and coding practices, and the layers come
// in the order of seed 000 §6.1.
func TestSystemPromptTopics(t *testing.T) {
	pc := loop.PromptContext{Environment: "<environment>\nX\n</environment>", ProjectDocs: "## AGENTS.md\n\nproject rule",
		UserInstructions: "user rule"}
	tests := []struct {
		p     *profile.Profile
		topic []string
	}{
		{profile.OpenAI("gpt-5.2-codex"), []string{"You are a coding agent", "# Tools", "apply_patch", "*** Begin Patch", "@@", "Coding practices", "When things fail"}},
		{profile.Anthropic("claude-sonnet-4-5"), []string{"You are a coding agent", "Tool selection", "read_file before you edit", "must be unique", "Prefer editing existing files", "Coding practices"}},
		{profile.Gemini("gemini-2.5-pro"), []string{"You are an interactive coding agent", "Tool usage", "GEMINI.md", "edit_file", "Coding practices"}},
	}
	for _, tt := range tests {
		t.Run(tt.p.ID(), func(t *testing.T) {
			got := tt.p.BuildSystemPrompt(pc)
			for _, s := range tt.topic {
				if !strings.Contains(got, s) {
					t.Errorf("prompt lacks %q", s)
				}
			}
			order := []string{"<environment>", "# Available tools", "- shell:", "# Project instructions", "project rule", "# User instructions", "user rule"}
			last := -1
			for _, s := range order {
				i := strings.Index(got, s)
				if i <= last {
					t.Errorf("%q missing or out of order", s)
				}
				last = i
			}
		})
	}
}

func TestCustomToolOnTop(t *testing.T) {
	p := profile.Gemini("gemini-2.5-pro")
	run := func(out string) tool.Executor {
		return func(context.Context, *tool.Invocation) (tool.Result, error) { return tool.Result{Output: out}, nil }
	}
	if err := p.Register(tool.Registered{Definition: tool.Definition{Name: "run_tests", Description: "Run the project's test suite",
		Parameters: json.RawMessage(`{"type":"object","properties":{"filter":{"type":"string"}}}`)}, Executor: run("tests")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Register(tool.Registered{Definition: tool.Definition{Name: "grep", Description: "custom grep",
		Parameters: json.RawMessage(`{"type":"object"}`)}, Executor: run("custom")}); err != nil {
		t.Fatal(err)
	}
	g, _ := p.Registry().Get("grep")
	if r, _ := g.Executor(t.Context(), &tool.Invocation{}); r.Output != "custom" {
		t.Error("the custom grep did not replace the profile's")
	}
	if !strings.Contains(p.BuildSystemPrompt(loop.PromptContext{}), "- run_tests: Run the project's test suite") {
		t.Error("custom tool not described in the prompt")
	}
	m := p.WithModel("gemini-3-flash")
	if m.Model() != "gemini-3-flash" || p.Model() != "gemini-2.5-pro" || m.Registry() != p.Registry() {
		t.Error("WithModel must copy the profile, keep the registry and leave the original alone")
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com",
		"-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPrepareGitRepository: environment block, git snapshot and project
// instructions from the git root down to the working directory, filtered by
// profile.
func TestPrepareGitRepository(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "AGENTS.md"), "root agents")
	write(t, filepath.Join(root, "CLAUDE.md"), "root claude")
	write(t, filepath.Join(root, "GEMINI.md"), "root gemini")
	write(t, filepath.Join(root, ".codex/instructions.md"), "root codex")
	write(t, filepath.Join(root, "svc/AGENTS.md"), "svc agents")
	write(t, filepath.Join(root, "svc/api/CLAUDE.md"), "api claude")
	git(t, root, "init", "-q")
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "first commit")
	git(t, root, "checkout", "-q", "-b", "feature")
	write(t, filepath.Join(root, "AGENTS.md"), "root agents, edited")
	write(t, filepath.Join(root, "new.txt"), "untracked")
	wd := filepath.Join(root, "svc/api")
	env, err := localenv.New(wd, localenv.WithConfinement(false))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		p       *profile.Profile
		want    []string
		notWant []string
	}{
		{profile.Anthropic("claude-sonnet-4-5"), []string{"root agents, edited", "root claude", "svc agents", "api claude"}, []string{"root gemini", "root codex"}},
		{profile.Gemini("gemini-2.5-pro"), []string{"root agents, edited", "root gemini", "svc agents"}, []string{"root claude", "api claude", "root codex"}},
		{profile.OpenAI("gpt-5.2-codex"), []string{"root agents, edited", "root codex", "svc agents"}, []string{"root claude", "root gemini"}},
	}
	for _, tt := range tests {
		t.Run(tt.p.ID(), func(t *testing.T) {
			pc, err := tt.p.Prepare(t.Context(), env, now)
			if err != nil {
				t.Fatal(err)
			}
			block := fmt.Sprintf("<environment>\nWorking directory: %s\nIs git repository: true\nGit branch: feature\nPlatform: %s\nOS version: %s\nToday's date: 2026-03-04\nModel: %s\nKnowledge cutoff: ",
				wd, env.Platform(), env.OSVersion(), tt.p.Model())
			if !strings.HasPrefix(pc.Environment, block) {
				t.Errorf("environment block:\n%s\nwant prefix:\n%s", pc.Environment, block)
			}
			for _, s := range []string{"Current branch: feature", "Status: 1 modified, 1 untracked", "first commit"} {
				if !strings.Contains(pc.Environment, s) {
					t.Errorf("git snapshot lacks %q:\n%s", s, pc.Environment)
				}
			}
			for _, s := range tt.want {
				if !strings.Contains(pc.ProjectDocs, s) {
					t.Errorf("project docs lack %q", s)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(pc.ProjectDocs, s) {
					t.Errorf("project docs include %q", s)
				}
			}
			if strings.Index(pc.ProjectDocs, "root agents") > strings.Index(pc.ProjectDocs, "svc agents") {
				t.Error("root files must come first")
			}
		})
	}
}

// countingEnv counts the commands run through the environment it wraps.
type countingEnv struct {
	tool.ExecutionEnvironment
	commands int
}

func (e *countingEnv) ExecCommand(ctx context.Context, cmd string, o tool.ExecOptions) (*tool.ExecResult, error) {
	e.commands++
	return e.ExecutionEnvironment.ExecCommand(ctx, cmd, o)
}

// TestPrepareTakesTheGitSnapshotInOneCommand: the snapshot on every
// session's start is one command (one process start and one round trip to
// the workspace), four before, and still sees branch, status and commits.
func TestPrepareTakesTheGitSnapshotInOneCommand(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "a.txt"), "a")
	git(t, root, "init", "-q")
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "only commit")
	write(t, filepath.Join(root, "a.txt"), "changed")
	local, err := localenv.New(root, localenv.WithConfinement(false))
	if err != nil {
		t.Fatal(err)
	}
	env := &countingEnv{ExecutionEnvironment: local}
	pc, err := profile.OpenAI("gpt-5.2-codex").Prepare(t.Context(), env, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if env.commands != 1 {
		t.Errorf("Prepare ran %d commands, want 1", env.commands)
	}
	for _, s := range []string{"Is git repository: true", "Status: 1 modified, 0 untracked", "only commit"} {
		if !strings.Contains(pc.Environment, s) {
			t.Errorf("environment lacks %q:\n%s", s, pc.Environment)
		}
	}
}

func TestPrepareNoGitAndBudget(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "AGENTS.md"), strings.Repeat("a", 40*1024))
	env, err := localenv.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := profile.Anthropic("claude-sonnet-4-5").Prepare(t.Context(), env, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pc.Environment, "Is git repository: false") || strings.Contains(pc.Environment, "git_snapshot") {
		t.Errorf("environment for a non-repository:\n%s", pc.Environment)
	}
	if !strings.HasSuffix(pc.ProjectDocs, "\n[Project instructions truncated at 32KB]") {
		t.Errorf("missing truncation marker; docs end %q", pc.ProjectDocs[len(pc.ProjectDocs)-60:])
	}
	if n := len(strings.TrimSuffix(pc.ProjectDocs, "\n[Project instructions truncated at 32KB]")); n != profile.DocsBudget {
		t.Errorf("kept %d bytes, want %d", n, profile.DocsBudget)
	}
}

// TestPrepareReadsInstructionsWhileTheSnapshotRuns: the working
// directory's instruction files are read while the git snapshot runs, not
// one round trip to the workspace after the other; what Prepare returns is
// the same (the root's files first, then the working directory's).
func TestPrepareReadsInstructionsWhileTheSnapshotRuns(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "AGENTS.md"), "root agents")
	write(t, filepath.Join(root, "svc/AGENTS.md"), "svc agents")
	write(t, filepath.Join(root, "svc/CLAUDE.md"), "svc claude")
	git(t, root, "init", "-q")
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "only commit")
	local, err := localenv.New(filepath.Join(root, "svc"), localenv.WithConfinement(false))
	if err != nil {
		t.Fatal(err)
	}
	env := &looptest.CommandsAfter{ExecutionEnvironment: local, Gate: looptest.NewGate(20 * time.Second), Reads: true}
	pc, err := profile.Anthropic("claude-sonnet-4-5").Prepare(t.Context(), env, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if env.Gate.Missed() {
		t.Error("the git snapshot ran while no instruction file was being read")
	}
	want := "## AGENTS.md\n\nroot agents\n\n## svc/AGENTS.md\n\nsvc agents\n\n## svc/CLAUDE.md\n\nsvc claude"
	if pc.ProjectDocs != want {
		t.Errorf("project docs:\n%q\nwant\n%q", pc.ProjectDocs, want)
	}
	if !strings.Contains(pc.Environment, "Is git repository: true") {
		t.Errorf("environment:\n%s", pc.Environment)
	}
}
