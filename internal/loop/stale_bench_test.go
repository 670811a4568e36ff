package loop_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// requestTokens estimates the input tokens of req (1 token ~ 4 characters
// of text, tool calls and tool results).
func requestTokens(req *llm.Request) int {
	n := 0
	for _, m := range req.Messages {
		for _, p := range m.Content {
			n += len(p.Text)
			if p.ToolCall != nil {
				n += len(p.ToolCall.Arguments)
			}
			if p.ToolResult != nil {
				n += len(p.ToolResult.Content)
			}
		}
	}
	return n / 4
}

// BenchmarkStaleToolResults reports the total input tokens of a 60-turn
// session that reads a 4.5 KB Go file per turn, with stale tool-result
// summaries off and on (seed 001), and how many times fewer "on" sends.
// The scenario must still succeed: the last turn expects the last result
// whole. Target: at least 3x fewer.
func BenchmarkStaleToolResults(b *testing.B) {
	const turns = 60
	dir := b.TempDir()
	env, err := localenv.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	var sc []scripted.Turn
	for i := range turns {
		name := fmt.Sprintf("f%02d.go", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(goFile(4500)), 0o644); err != nil {
			b.Fatal(err)
		}
		sc = append(sc, looptest.Tools(looptest.Call("read_file", map[string]string{"file_path": name})))
	}
	sc = append(sc, scripted.Turn{Text: "all read", Expect: looptest.ExpectResult("package demo")})
	run := func(stale int) int {
		cfg := loop.DefaultConfig()
		cfg.StaleToolResultTurns = stale
		cfg.Compaction.Disabled = true // measure the summaries alone
		cfg.EnableLoopDetection = false
		spy := &spyClient{inner: scripted.New(looptest.Script(sc...), "m")}
		s, err := loop.New(anthropic(), env, spy, loop.WithConfig(cfg))
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range s.Events() {
			}
		}()
		if err := s.Submit(b.Context(), "read every file"); err != nil {
			b.Fatalf("scenario failed (stale=%d): %v", stale, err)
		}
		_ = s.Close()
		total := 0
		for _, r := range spy.requests() {
			total += requestTokens(r)
		}
		return total
	}
	var off, on int
	for b.Loop() {
		off, on = run(-1), run(0)
	}
	b.ReportMetric(float64(off), "input-tokens-off")
	b.ReportMetric(float64(on), "input-tokens-on")
	b.ReportMetric(float64(off)/float64(on), "x-fewer")
}
