package loop_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// goFile is Go source of about n bytes.
func goFile(n int) string {
	var b strings.Builder
	b.WriteString("package demo\n\n")
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "func f%d() int { return %d }\n", i, i)
	}
	return b.String()
}

// Tool results older than N model turns reach the model as one-line
// summaries, while history (and so the journal) keeps them whole.
func TestStaleToolResultsAreSummarisedInTheRequestOnly(t *testing.T) {
	tests := []struct {
		name      string
		turns     int // SessionConfig.StaleToolResultTurns
		summaries int // results sent as summaries in the last request
	}{
		{"default age 4", 0, 2},
		{"age 2", 2, 4},
		{"off", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, dir := newEnv(t)
			var turns []scripted.Turn
			for i := range 6 {
				name := fmt.Sprintf("f%d.go", i)
				if err := os.WriteFile(filepath.Join(dir, name), []byte(goFile(3000)), 0o644); err != nil {
					t.Fatal(err)
				}
				turns = append(turns, tools(call("read_file", map[string]string{"file_path": name})))
			}
			turns = append(turns, text("read them all"))
			cfg := loop.DefaultConfig()
			cfg.StaleToolResultTurns = tt.turns
			spy := &spyClient{inner: scripted.New(script(turns...), "m")}
			s, err := loop.New(anthropic(), env, spy, loop.WithConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Submit(t.Context(), "read the files"); err != nil {
				t.Fatal(err)
			}
			reqs := spy.requests()
			var summaries, full int
			for _, m := range reqs[len(reqs)-1].Messages {
				for _, p := range m.Content {
					if p.ToolResult == nil {
						continue
					}
					switch {
					case strings.HasPrefix(p.ToolResult.Content, "[Summary: Returned ") &&
						strings.HasSuffix(p.ToolResult.Content, " of Go source code]"):
						summaries++
					case strings.Contains(p.ToolResult.Content, "package demo"):
						full++
					}
				}
			}
			if summaries != tt.summaries || full != 6-tt.summaries {
				t.Errorf("last request has %d summaries and %d full results, want %d and %d", summaries, full, tt.summaries, 6-tt.summaries)
			}
			for _, turn := range s.History() {
				if r, ok := turn.(*loop.ToolResultsTurn); ok && !strings.Contains(r.Results[0].Content, "package demo") {
					t.Errorf("history lost a full result: %.80q", r.Results[0].Content)
				}
			}
		})
	}
}

func TestSummarizeToolResult(t *testing.T) {
	tests := []struct {
		name, content, path, want string
	}{
		{"the seed's example", strings.Repeat("x", 4499) + "\n", "main.go", "[Summary: Returned 4500 bytes (1 lines) of Go source code]"},
		{"Go by content", "package x\n\nfunc f() {}\n", "", "[Summary: Returned 23 bytes (3 lines) of Go source code]"},
		{"numbered read_file lines", "     1\tpackage x\n     2\tfunc f() {}", "", "[Summary: Returned 35 bytes (2 lines) of Go source code]"},
		{"Python", "import os\ndef f():\n    pass\n", "", "[Summary: Returned 28 bytes (3 lines) of Python source code]"},
		{"JSON", `{"a": [1, 2]}`, "", "[Summary: Returned 13 bytes (1 lines) of JSON]"},
		{"Markdown", "# Title\n\ntext\n", "", "[Summary: Returned 14 bytes (3 lines) of Markdown]"},
		{"path wins over content", "package x\n", "notes.yaml", "[Summary: Returned 10 bytes (1 lines) of YAML]"},
		{"plain text", "hello\nworld\n", "", "[Summary: Returned 12 bytes (2 lines) of text]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := loop.SummarizeToolResult(tt.content, tt.path); got != tt.want {
				t.Errorf("SummarizeToolResult = %q, want %q", got, tt.want)
			}
		})
	}
}

// The todo tool keeps the plan: PLAN_UPDATED carries it, Plan returns it,
// a bad plan is an error result the model can fix, and a session restored
// from the events has the same plan.
func TestTodoToolKeepsTheVisiblePlan(t *testing.T) {
	env, _ := newEnv(t)
	plan := []loop.PlanItem{{Content: "read the code", Status: loop.PlanCompleted},
		{Content: "write the fix", Status: loop.PlanInProgress}, {Content: "run the tests", Status: loop.PlanPending}}
	tooLong := make([]loop.PlanItem, loop.MaxPlanItems+1)
	for i := range tooLong {
		tooLong[i] = loop.PlanItem{Content: fmt.Sprintf("step %d", i), Status: loop.PlanPending}
	}
	s := newSession(t, anthropic(), env, script(
		tools(call(loop.TodoToolName, map[string]any{"todos": plan})),
		tools(call(loop.TodoToolName, map[string]any{"todos": tooLong})),
		tools(call(loop.TodoToolName, map[string]any{"todos": []loop.PlanItem{{Content: "x", Status: "done"}}})),
		text("planned"),
	), loop.WithID("todo"))
	rec := record(s)
	if err := s.Submit(t.Context(), "plan it"); err != nil {
		t.Fatal(err)
	}
	if got := s.Plan(); fmt.Sprint(got) != fmt.Sprint(plan) {
		t.Errorf("Plan() = %v, want %v (bad plans must not replace it)", got, plan)
	}
	_ = s.Close()
	evs := rec.All(t)
	updates := ofKind(evs, loop.EventPlanUpdated)
	if len(updates) != 1 || fmt.Sprint(updates[0].Data.Plan) != fmt.Sprint(plan) {
		t.Errorf("PLAN_UPDATED events %+v, want one with the plan", updates)
	}
	ends := ofKind(evs, loop.EventToolCallEnd)
	if !strings.Contains(ends[0].Data.Output, "[x] read the code") || !strings.Contains(ends[0].Data.Output, "[>] write the fix") {
		t.Errorf("todo output %q, want the rendered plan", ends[0].Data.Output)
	}
	for _, e := range ends[1:] {
		if !e.Data.IsError {
			t.Errorf("todo call with a bad plan succeeded: %+v", e.Data)
		}
	}
	restored, err := loop.Restore(anthropic(), env, scripted.New(script(), "m"), evs[:len(evs)-1])
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Plan(); fmt.Sprint(got) != fmt.Sprint(plan) {
		t.Errorf("restored Plan() = %v, want %v", got, plan)
	}
}

func writeSkill(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Skills are discovered walking up from a nested working directory, come
// with in-memory (ConfigMap) skills, are named in the system prompt and
// loaded with the skill tool; a malformed front matter and a symlink out of
// the workspace are WARNING events, never a failure.
func TestSkillsDiscoveryPromptAndLoading(t *testing.T) {
	env, dir := newEnv(t)
	outside := t.TempDir()
	writeSkill(t, filepath.Join(outside, "evil"), "---\nname: evil\ndescription: escapes\n---\nsecret body\n")
	writeSkill(t, filepath.Join(dir, ".agents/skills/review"), "---\nname: review\ndescription: How we review Go code.\n---\n# Review\n\nCheck errors are wrapped.\n")
	writeSkill(t, filepath.Join(dir, "a/.claude/skills/deploy"), "---\nname: deploy\ndescription: \"Deploy: step by step\"\n---\nRun make deploy.\n")
	writeSkill(t, filepath.Join(dir, "a/b/skills/broken"), "---\nname: [unclosed\ndescription: x\n---\nbody\n")
	if err := os.Symlink(filepath.Join(outside, "evil"), filepath.Join(dir, ".agents/skills/evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := loop.DefaultConfig()
	cfg.Skills = []loop.Skill{{Name: "platform", Description: "Platform team rules.", Body: "Use the internal registry.", Source: "configmap/team"}}
	spy := &spyClient{inner: scripted.New(script(
		tools(call(loop.SkillToolName, map[string]string{"name": "review"})),
		tools(call(loop.SkillToolName, map[string]string{"name": "platform"})),
		tools(call(loop.SkillToolName, map[string]string{"name": "evil"})),
		text("loaded"),
	), "m")}
	s, err := loop.New(anthropic(), tool.Scoped(env, "a/b/c"), spy, loop.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	rec := record(s)
	if err := s.Submit(t.Context(), "review it"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	system := spy.requests()[0].Messages[0].Text()
	for _, want := range []string{"**review**: How we review Go code.", "**deploy**: Deploy: step by step", "**platform**: Platform team rules."} {
		if !strings.Contains(system, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
	if strings.Contains(system, "evil") || strings.Contains(system, "broken") {
		t.Errorf("system prompt names a refused skill")
	}
	evs := rec.All(t)
	ends := ofKind(evs, loop.EventToolCallEnd)
	if len(ends) != 3 || !strings.Contains(ends[0].Data.Output, "Check errors are wrapped.") ||
		!strings.Contains(ends[1].Data.Output, "Use the internal registry.") || !ends[2].Data.IsError ||
		strings.Contains(ends[2].Data.Output, "secret body") {
		t.Errorf("skill tool results %+v", ends)
	}
	var warnings []string
	for _, w := range ofKind(evs, loop.EventWarning) {
		warnings = append(warnings, w.Data.Message)
	}
	all := strings.Join(warnings, "\n")
	if !strings.Contains(all, "broken/SKILL.md: front matter") || !strings.Contains(all, "evil/SKILL.md") {
		t.Errorf("WARNING events %q, want the malformed and the escaping skill reported", warnings)
	}
}

// TestSkillsAreFoundWhileThePromptContextIsGathered: a session's start
// looks for workspace skills while the profile gathers its context (the git
// snapshot), not one round trip to the workspace after the other, and the
// skills found are in the system prompt as before.
func TestSkillsAreFoundWhileThePromptContextIsGathered(t *testing.T) {
	local, dir := newEnv(t)
	writeSkill(t, filepath.Join(dir, ".agents/skills/review"), "---\nname: review\ndescription: How we review Go code.\n---\nCheck errors.\n")
	env := &looptest.CommandsAfter{ExecutionEnvironment: local, Gate: looptest.NewGate(20 * time.Second), Lists: true}
	spy := &spyClient{inner: scripted.New(script(text("done")), "m")}
	s, err := loop.New(anthropic(), env, spy)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(t.Context(), "hello"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if env.Gate.Missed() {
		t.Error("the prompt context's command ran while no skill folder was being listed")
	}
	if system := spy.requests()[0].Messages[0].Text(); !strings.Contains(system, "**review**: How we review Go code.") {
		t.Errorf("system prompt lacks the skill found:\n%s", system)
	}
}

// firstListAfterSecondEnv holds the listing of the first skill folder name
// back until the second is being listed.
type firstListAfterSecondEnv struct {
	tool.ExecutionEnvironment
	second *looptest.Gate
}

func (e *firstListAfterSecondEnv) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	switch {
	case strings.HasSuffix(p, loop.SkillDirs[1]):
		e.second.Open()
	case strings.HasSuffix(p, loop.SkillDirs[0]):
		e.second.Wait()
	}
	return e.ExecutionEnvironment.ListDirectory(ctx, p, depth)
}

// TestSkillFoldersAreListedAtOnce: the skill folders of a directory are
// listed side by side, not one round trip to the workspace after the
// other, and discovery finds the same skills, nearer ones first.
func TestSkillFoldersAreListedAtOnce(t *testing.T) {
	local, dir := newEnv(t)
	writeSkill(t, filepath.Join(dir, "a", loop.SkillDirs[0], "near"), "---\nname: near\ndescription: Nearer.\n---\nn\n")
	writeSkill(t, filepath.Join(dir, "a", loop.SkillDirs[1], "twin"), "---\nname: twin\ndescription: Nearer twin.\n---\nt\n")
	writeSkill(t, filepath.Join(dir, loop.SkillDirs[2], "twin"), "---\nname: twin\ndescription: Farther twin.\n---\nt\n")
	writeSkill(t, filepath.Join(dir, loop.SkillDirs[2], "far"), "---\nname: far\ndescription: Farther.\n---\nf\n")
	env := &firstListAfterSecondEnv{ExecutionEnvironment: tool.Scoped(local, "a"), second: looptest.NewGate(20 * time.Second)}
	skills, problems := loop.DiscoverSkills(t.Context(), env)
	if env.second.Missed() {
		t.Error("the first skill folder was listed before the second was asked for")
	}
	var got []string
	for _, sk := range skills {
		got = append(got, sk.Name+": "+sk.Description)
	}
	want := []string{"near: Nearer.", "twin: Nearer twin.", "far: Farther."}
	if strings.Join(got, "|") != strings.Join(want, "|") || len(problems) != 0 {
		t.Errorf("skills %q, problems %v; want %q and none", got, problems, want)
	}
}

// goroutinesSeenEnv records the most goroutines running while it reads.
type goroutinesSeenEnv struct {
	tool.ExecutionEnvironment
	most atomic.Int64
}

func (e *goroutinesSeenEnv) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	n := int64(runtime.NumGoroutine())
	for m := e.most.Load(); n > m && !e.most.CompareAndSwap(m, n); m = e.most.Load() {
	}
	return e.ExecutionEnvironment.ReadFile(ctx, p, o)
}

// TestSkillDiscoveryOfAFullFolderKeepsFewGoroutines: a workspace that puts
// thousands of entries in a skill folder gets each SKILL.md read, the valid
// one found, and the manager's discovery never runs more than a few
// goroutines for it (one per entry would hold thousands of stacks).
func TestSkillDiscoveryOfAFullFolderKeepsFewGoroutines(t *testing.T) {
	local, dir := newEnv(t)
	root := filepath.Join(dir, loop.SkillDirs[0])
	for i := range 3000 {
		if err := os.MkdirAll(filepath.Join(root, fmt.Sprintf("empty-%04d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeSkill(t, filepath.Join(root, "real"), "---\nname: real\ndescription: The one skill.\n---\nr\n")
	env := &goroutinesSeenEnv{ExecutionEnvironment: local}
	before := runtime.NumGoroutine()
	skills, _ := loop.DiscoverSkills(t.Context(), env)
	if len(skills) != 1 || skills[0].Name != "real" {
		t.Fatalf("skills %+v, want the one named real", skills)
	}
	if extra := env.most.Load() - int64(before); extra > 100 {
		t.Errorf("discovery ran %d goroutines more than before it, want a few", extra)
	}
}

func TestParseSkill(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"valid", "---\nname: a\ndescription: b\n---\nbody", ""},
		{"no front matter", "# just markdown", "no front matter"},
		{"unclosed", "---\nname: a\ndescription: b\n", "not closed"},
		{"bad yaml", "---\nname: [a\n---\n", "front matter"},
		{"no description", "---\nname: a\n---\nbody", "no description"},
		{"bad name", "---\nname: a b\ndescription: d\n---\n", "skill name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sk, err := loop.ParseSkill([]byte(tt.in), "x/SKILL.md")
			if tt.wantErr == "" {
				if err != nil || sk.Name != "a" || sk.Description != "b" || sk.Body != "body" {
					t.Fatalf("ParseSkill = %+v, %v", sk, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseSkill error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
