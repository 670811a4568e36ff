package localenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

func TestExecCommand(t *testing.T) {
	e, dir := newEnv(t)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		cmd      string
		opts     tool.ExecOptions
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{"stdout and stderr separate", "echo out; echo err >&2; exit 3", tool.ExecOptions{}, "out\n", "err\n", 3},
		{"working dir default is root", "pwd", tool.ExecOptions{}, e.canonRoot + "\n", "", 0},
		{"working dir relative", "pwd", tool.ExecOptions{WorkingDir: "sub"}, filepath.Join(e.canonRoot, "sub") + "\n", "", 0},
		{"extra env", `printf %s "$FOO"`, tool.ExecOptions{Env: map[string]string{"FOO": "bar baz"}}, "bar baz", "", 0},
		{"stdin is empty", "cat; echo end", tool.ExecOptions{}, "end\n", "", 0},
		{"bash syntax", "a=(x y); echo ${#a[@]}", tool.ExecOptions{}, "2\n", "", 0},
		{"killed by signal", "kill -9 $$", tool.ExecOptions{}, "", "", 128 + 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.ExecCommand(t.Context(), tt.cmd, tt.opts)
			if err != nil {
				t.Fatalf("ExecCommand: %v", err)
			}
			if res.Stdout != tt.wantOut || res.Stderr != tt.wantErr || res.ExitCode != tt.wantCode {
				t.Errorf("got out=%q err=%q code=%d, want out=%q err=%q code=%d", res.Stdout, res.Stderr, res.ExitCode, tt.wantOut, tt.wantErr, tt.wantCode)
			}
			if res.TimedOut {
				t.Error("TimedOut set")
			}
			if res.Duration <= 0 {
				t.Error("Duration not recorded")
			}
		})
	}
	if _, err := e.ExecCommand(t.Context(), "true", tool.ExecOptions{WorkingDir: "missing"}); !errors.Is(err, tool.ErrNotFound) {
		t.Errorf("missing working dir: %v, want ErrNotFound", err)
	}
}

func TestExecShellFallback(t *testing.T) {
	e, _ := newEnv(t, WithShell("/bin/sh"))
	res, err := e.ExecCommand(t.Context(), "echo $0", tool.ExecOptions{})
	if err != nil || res.Stdout != "/bin/sh\n" {
		t.Fatalf("got %+v, %v; want /bin/sh", res, err)
	}
}

func TestExecOutputCap(t *testing.T) {
	e, _ := newEnv(t, WithMaxOutput(10))
	res, err := e.ExecCommand(t.Context(), "printf '%0100d' 0", tool.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Stdout, "0000000000\n[output truncated: 90 more bytes dropped]") {
		t.Errorf("Stdout = %q, want 10 bytes and a marker", res.Stdout)
	}
}

func TestExecEnvFiltering(t *testing.T) {
	base := []string{
		"PATH=/usr/bin:/bin", "HOME=/home/agent", "LANG=C.UTF-8", "LC_ALL=C", "GOPATH=/go",
		"OPENAI_API_KEY=sk-1", "github_token=gh", "DB_PASSWORD=pw", "AWS_SECRET=s", "GCP_CREDENTIAL=c",
		"API_KEY=k", "RANDOM_SETTING=r",
	}
	tests := []struct {
		policy tool.EnvPolicy
		want   []string
	}{
		{tool.EnvInheritCore, []string{"GOPATH=/go", "HOME=/home/agent", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/usr/bin:/bin", "X_EXTRA=1"}},
		{tool.EnvInheritAll, []string{"GOPATH=/go", "HOME=/home/agent", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/usr/bin:/bin", "RANDOM_SETTING=r", "X_EXTRA=1"}},
		{tool.EnvInheritNone, []string{"X_EXTRA=1"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			e, _ := newEnv(t, WithEnvPolicy(tt.policy), WithBaseEnv(base))
			// env from a shell also shows PWD, SHLVL and _ that the shell sets itself.
			res, err := e.ExecCommand(t.Context(), "/usr/bin/env", tool.ExecOptions{Env: map[string]string{"X_EXTRA": "1"}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				k, _, _ := strings.Cut(l, "=")
				if k == "PWD" || k == "SHLVL" || k == "_" || k == "OLDPWD" {
					continue
				}
				got = append(got, l)
			}
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("env =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestIsSensitive(t *testing.T) {
	for name, want := range map[string]bool{
		"OPENAI_API_KEY": true, "openai_api_key": true, "GH_TOKEN": true, "Db_Password": true,
		"X_SECRET": true, "A_CREDENTIAL": true, "API_KEY": true, "TOKEN": true,
		"PATH": false, "TOKENIZER": false, "SECRETS_DIR": false, "HOME": false,
	} {
		if got := IsSensitive(name); got != want {
			t.Errorf("IsSensitive(%q) = %v, want %v", name, got, want)
		}
	}
}

// processGone polls until pid no longer exists (or is a zombie waiting for
// its reaper).
func processGone(t *testing.T, pid int) bool {
	t.Helper()
	return proctest.Gone(pid, 5*time.Second)
}

// stubbornScript starts a child that ignores SIGTERM and a grandchild (its
// own child), prints their pids, then sleeps.
const stubbornScript = `
bash -c 'trap "echo child-got-TERM" TERM; sleep 60 & echo grandchild=$!; while true; do sleep 0.05; done' &
echo child=$!
echo partial-output
wait
`

func parsePids(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, l := range strings.Split(out, "\n") {
		if _, v, ok := strings.Cut(l, "="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

func TestExecTimeoutKillsWholeGroup(t *testing.T) {
	e, _ := newEnv(t, WithKillGrace(500*time.Millisecond))
	var mu sync.Mutex
	var streamed strings.Builder
	res, err := e.ExecCommand(t.Context(), stubbornScript, tool.ExecOptions{
		Timeout: 2 * time.Second,
		OnOutput: func(b []byte) {
			mu.Lock()
			defer mu.Unlock()
			streamed.Write(b)
		},
	})
	if err != nil {
		t.Fatalf("ExecCommand: %v", err)
	}
	if !res.TimedOut {
		t.Error("TimedOut not set")
	}
	mu.Lock()
	if !strings.Contains(streamed.String(), "partial-output") {
		t.Errorf("OnOutput did not stream the partial output: %q", streamed.String())
	}
	mu.Unlock()
	if !strings.Contains(res.Stdout, "partial-output") {
		t.Errorf("partial output lost: %q", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "child-got-TERM") {
		t.Errorf("the group did not get SIGTERM before SIGKILL: %q", res.Stdout)
	}
	pids := parsePids(t, res.Stdout)
	if len(pids) != 2 {
		t.Fatalf("want child and grandchild pids in %q", res.Stdout)
	}
	for _, pid := range pids {
		if !processGone(t, pid) {
			t.Errorf("pid %d still running after the timeout", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestExecCancelKillsGroupAndKeepsOutput(t *testing.T) {
	e, _ := newEnv(t, WithKillGrace(200*time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var streamed strings.Builder
	res, err := e.ExecCommand(ctx, stubbornScript, tool.ExecOptions{
		Timeout: time.Minute,
		OnOutput: func(b []byte) {
			mu.Lock()
			defer mu.Unlock()
			streamed.Write(b)
			if strings.Contains(streamed.String(), "grandchild=") && strings.Contains(streamed.String(), "partial-output") {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil {
		t.Fatal("no partial result on cancellation")
	}
	if res.TimedOut {
		t.Error("TimedOut set on cancellation")
	}
	if !strings.Contains(res.Stdout, "partial-output") {
		t.Errorf("partial output lost: %q", res.Stdout)
	}
	for _, pid := range parsePids(t, res.Stdout) {
		if !processGone(t, pid) {
			t.Errorf("pid %d still running after cancellation", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestExecStreamsWhileRunning(t *testing.T) {
	e, dir := newEnv(t)
	gate := filepath.Join(dir, "go-on")
	var once sync.Once
	// The command only finishes once OnOutput has seen "first".
	res, err := e.ExecCommand(t.Context(), `echo first; while [ ! -f go-on ]; do sleep 0.02; done; echo second >&2`, tool.ExecOptions{
		Timeout: 5 * time.Second,
		OnOutput: func(b []byte) {
			if strings.Contains(string(b), "first") {
				once.Do(func() { _ = os.WriteFile(gate, nil, 0o644) })
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut || res.Stdout != "first\n" || res.Stderr != "second\n" {
		t.Errorf("got %+v; want streamed first, then second", res)
	}
}

func TestExecBackgroundProcesses(t *testing.T) {
	e, _ := newEnv(t)
	// A background process holding stdout does not make the call hang; it
	// is killed once the shell has exited and the pipes were drained.
	res, err := e.ExecCommand(t.Context(), `sleep 30 & echo pid=$!; echo done`, tool.ExecOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut || res.ExitCode != 0 || !strings.Contains(res.Stdout, "done") {
		t.Errorf("got %+v; want a normal exit although a background process holds stdout", res)
	}
	for _, pid := range parsePids(t, res.Stdout) {
		if !processGone(t, pid) {
			t.Errorf("background process %d holding the output survived", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// One whose output is redirected is left running (e.g. a dev server).
	res, err = e.ExecCommand(t.Context(), `sleep 30 >/dev/null 2>&1 & echo pid=$!`, tool.ExecOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pids := parsePids(t, res.Stdout)
	if len(pids) != 1 {
		t.Fatalf("no pid in %q", res.Stdout)
	}
	t.Cleanup(func() { _ = syscall.Kill(pids[0], syscall.SIGKILL) })
	if err := syscall.Kill(pids[0], 0); err != nil {
		t.Errorf("redirected background process %d was killed: %v", pids[0], err)
	}
}
