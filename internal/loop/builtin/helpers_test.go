package builtin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// newEnv returns a real local environment over a fresh directory.
func newEnv(t testing.TB) (*localenv.Env, string) {
	t.Helper()
	dir := t.TempDir()
	env, err := localenv.New(dir)
	if err != nil {
		t.Fatalf("localenv.New: %v", err)
	}
	t.Cleanup(func() { env.Close() })
	return env, dir
}

// writeFiles creates files (relative path -> content) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readBack(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

// call runs reg with args (marshalled unless already a string) and returns
// the result and the streamed output.
type call struct {
	env       tool.ExecutionEnvironment
	subagents tool.SubagentSpawner
	deflt     time.Duration
	max       time.Duration
	files     tool.FileViews  // read tracking; nil disables it
	ctx       context.Context // the call's context; nil means t.Context()
}

func (c call) run(t testing.TB, reg tool.Registered, args any) (tool.Result, string) {
	t.Helper()
	var raw json.RawMessage
	switch a := args.(type) {
	case string:
		raw = json.RawMessage(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		raw = b
	}
	var mu sync.Mutex
	var streamed strings.Builder
	inv := &tool.Invocation{
		CallID:         "call-1",
		Name:           reg.Definition.Name,
		Arguments:      raw,
		Env:            c.env,
		Subagents:      c.subagents,
		DefaultTimeout: c.deflt,
		MaxTimeout:     c.max,
		Files:          c.files,
		Output: func(d string) {
			mu.Lock()
			streamed.WriteString(d)
			mu.Unlock()
		},
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	res, err := reg.Executor(ctx, inv)
	if err != nil {
		t.Fatalf("%s returned error %v; want a result", reg.Definition.Name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return res, streamed.String()
}

// expect checks a result: error flag and substrings.
func expect(t testing.TB, res tool.Result, isError bool, contains ...string) {
	t.Helper()
	if res.IsError != isError {
		t.Errorf("IsError = %v, want %v; output:\n%s", res.IsError, isError, res.Output)
	}
	for _, c := range contains {
		if !strings.Contains(res.Output, c) {
			t.Errorf("output does not contain %q; output:\n%s", c, res.Output)
		}
	}
}

// newViews returns empty read tracking.
func newViews() *tool.Views { return tool.NewViews() }
