package k8senv

import (
	"bufio"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestStdioProcess: a process started through the real sidecar over the
// pod's exec stream echoes its stdin, shares the session's stream (or has
// its own in per-call mode), and reports how it ended.
func TestStdioProcess(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      Mode
		wantExecs int32
	}{
		{name: "persistent", mode: Persistent, wantExecs: 1},
		{name: "per call", mode: PerCall, wantExecs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			env := newPool(t, h, func(c *Config) { c.Mode = tc.mode }).Env(h.target())
			rwc, err := env.StartStdio(t.Context(), []string{"sh", "-c", `read line; echo "got $line from $(basename "$(pwd)")"; echo bye >&2; exit 5`}, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			defer rwc.Close()
			if _, err := env.ExecCommand(t.Context(), "true", tool.ExecOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(rwc, "ping\n"); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(rwc)
			line, err := r.ReadString('\n')
			if want := "got ping from " + filepath.Base(h.root) + "\n"; err != nil || line != want {
				t.Fatalf("line = %q, %v; want %q", line, err, want)
			}
			_, err = r.ReadString('\n')
			var exit *executor.StdioExitError
			if !errors.As(err, &exit) || exit.ExitCode != 5 || !strings.Contains(err.Error(), "bye") {
				t.Errorf("end = %v, want exit code 5 with its stderr", err)
			}
			if n := h.websocketExecs.Load() + h.spdyExecs.Load(); n != tc.wantExecs {
				t.Errorf("%d exec streams, want %d", n, tc.wantExecs)
			}
		})
	}
}
