package loop_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// TestValidationMatrix is the matrix of seed 000 §9.12 over the three
// profiles, with the in-memory scripted client standing in for the real
// APIs. The rows are those of looptest.RunMatrix, which
// internal/llm/provider runs over the real adapters.
func TestValidationMatrix(t *testing.T) {
	looptest.RunMatrix(t, scriptedClient)
}

// TestCommandTimeouts: shell calls get the profile's default (10 s for
// openai and gemini, 120 s for anthropic) unless SessionConfig sets one; the
// maximum is passed along for timeout_ms.
func TestCommandTimeouts(t *testing.T) {
	tests := []struct {
		pv   looptest.Provider
		cfg  time.Duration
		want time.Duration
	}{
		{looptest.Providers[0], 0, 10 * time.Second},
		{looptest.Providers[1], 0, 120 * time.Second},
		{looptest.Providers[2], 0, 10 * time.Second},
		{looptest.Providers[1], 3 * time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v", tt.pv.Name, tt.cfg), func(t *testing.T) {
			p := tt.pv.New()
			var got, max time.Duration
			customTool(t, p.Registry(), "probe", "", func(_ context.Context, inv *tool.Invocation) (tool.Result, error) {
				got, max = inv.DefaultTimeout, inv.MaxTimeout
				return tool.Result{Output: "ok"}, nil
			})
			cfg := loop.DefaultConfig()
			cfg.DefaultCommandTimeout = tt.cfg
			env, _ := newEnv(t)
			s := newSession(t, p, env, script(tools(call("probe", map[string]any{})), text("ok")), loop.WithConfig(cfg))
			rec := record(s)
			if err := s.Submit(t.Context(), "probe"); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			rec.All(t)
			if got != tt.want || max != 600*time.Second {
				t.Errorf("timeouts default %v max %v, want %v and 10m", got, max, tt.want)
			}
		})
	}
}

// readOnly is a consumer-written ExecutionEnvironment (a decorator over
// localenv) that rejects writes: custom environments plug in unchanged.
type readOnly struct{ tool.ExecutionEnvironment }

func (readOnly) WriteFile(context.Context, string, []byte) error {
	return fmt.Errorf("write operations are disabled in read-only mode")
}

func TestCustomExecutionEnvironment(t *testing.T) {
	env, dir := newEnv(t)
	s := newSession(t, anthropic(), readOnly{env}, script(
		tools(call("write_file", map[string]string{"file_path": "x.txt", "content": "x"})),
		scripted.Turn{Expect: looptest.ExpectResult("read-only mode"), Text: "Cannot write."},
	))
	rec := record(s)
	if err := s.Submit(t.Context(), "write x"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	rec.All(t)
	if _, err := os.Stat(filepath.Join(dir, "x.txt")); err == nil {
		t.Error("the read-only environment was bypassed")
	}
}
