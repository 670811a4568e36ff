package k8senv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

func newPool(t *testing.T, h *harness, mutate ...func(*Config)) *Pool {
	t.Helper()
	cfg := h.config()
	for _, m := range mutate {
		m(&cfg)
	}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// exercise runs every operation through env; root is the host directory
// behind the pod's working directory.
func exercise(t *testing.T, env tool.ExecutionEnvironment, root string) {
	t.Helper()
	ctx := t.Context()
	if err := env.Initialize(ctx); err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	if err := env.WriteFile(ctx, "src/main.go", []byte("package main\n\nfunc main() {}\n")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "src/main.go")); !strings.HasPrefix(string(got), "package main") {
		t.Errorf("file in the container = %q", got)
	}
	fc, err := env.ReadFile(ctx, "src/main.go", tool.ReadOptions{Offset: 3})
	if err != nil || string(fc.Content) != "func main() {}\n" || fc.TotalLines != 3 {
		t.Errorf("ReadFile = %+v, %v", fc, err)
	}
	if ok, err := env.FileExists(ctx, "src"); !ok || err != nil {
		t.Errorf("FileExists = %v, %v", ok, err)
	}
	ents, err := env.ListDirectory(ctx, "", 2)
	if err != nil || len(ents) != 2 || ents[1].Name != "src/main.go" {
		t.Errorf("ListDirectory = %+v, %v", ents, err)
	}
	gr, err := env.Grep(ctx, "func", "", tool.GrepOptions{})
	if err != nil || len(gr.Matches) != 1 || gr.Matches[0].Line != 3 {
		t.Errorf("Grep = %+v, %v", gr, err)
	}
	paths, err := env.Glob(ctx, "**/*.go", "")
	if err != nil || len(paths) != 1 || paths[0] != "src/main.go" {
		t.Errorf("Glob = %q, %v", paths, err)
	}
	var mu sync.Mutex
	var streamed strings.Builder
	res, err := env.ExecCommand(ctx, "ls src; echo err >&2; exit 7", tool.ExecOptions{
		OnOutput: func(b []byte) { mu.Lock(); streamed.Write(b); mu.Unlock() },
	})
	if err != nil || res.Stdout != "main.go\n" || res.Stderr != "err\n" || res.ExitCode != 7 {
		t.Errorf("ExecCommand = %+v, %v", res, err)
	}
	mu.Lock()
	if !strings.Contains(streamed.String(), "main.go") {
		t.Errorf("OnOutput got %q", streamed.String())
	}
	mu.Unlock()
	res, err = env.ExecCommand(ctx, "echo partial; sleep 30", tool.ExecOptions{Timeout: time.Second})
	if err != nil || !res.TimedOut || res.Stdout != "partial\n" {
		t.Errorf("ExecCommand timeout = %+v, %v", res, err)
	}
	if _, err := env.ReadFile(ctx, "../../etc/passwd", tool.ReadOptions{}); !errors.Is(err, tool.ErrPathEscapes) {
		t.Errorf("ReadFile outside the root = %v, want ErrPathEscapes", err)
	}
	if err := env.DeleteFile(ctx, "src/main.go"); err != nil {
		t.Errorf("DeleteFile: %v", err)
	}
	if _, err := env.ReadFile(ctx, "src/main.go", tool.ReadOptions{}); !errors.Is(err, tool.ErrNotFound) {
		t.Errorf("ReadFile deleted = %v, want ErrNotFound", err)
	}
	if err := env.Cleanup(ctx); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
	if env.Platform() != "linux" || env.OSVersion() == "" || env.WorkingDirectory() != root {
		t.Errorf("metadata %q %q %q", env.Platform(), env.OSVersion(), env.WorkingDirectory())
	}
}

func TestAllOperationsOverWebSocket(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	exercise(t, env, h.root)
	if ws, spdy := h.websocketExecs.Load(), h.spdyExecs.Load(); ws != 1 || spdy != 0 {
		t.Errorf("execs: websocket %d, spdy %d; want one websocket stream for every call", ws, spdy)
	}
}

func TestFallbackToSPDY(t *testing.T) {
	h := newHarness(t)
	h.legacy.Store(true)
	env := newPool(t, h).Env(h.target())
	exercise(t, env, h.root)
	if ws, spdy := h.websocketExecs.Load(), h.spdyExecs.Load(); ws != 0 || spdy != 1 {
		t.Errorf("execs: websocket %d, spdy %d; want one SPDY stream after the 403", ws, spdy)
	}
}

func TestSessionsShareOneStream(t *testing.T) {
	h := newHarness(t)
	p := newPool(t, h)
	a, b := p.Env(h.target()), p.Env(h.target())
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		env := a
		if i%2 == 1 {
			env = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := env.ExecCommand(t.Context(), fmt.Sprintf("echo %d", i), tool.ExecOptions{})
			if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("call %d = %+v, %v", i, res, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := h.websocketExecs.Load() + h.spdyExecs.Load(); n != 1 {
		t.Errorf("%d exec streams for two sessions on one pod, want 1", n)
	}
}

func TestStreamDropFailsInFlightAndNextCallReconnects(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(h *harness)
		// cleanedUp: the sidecar saw its stdin end and stopped the command.
		// A SIGKILLed sidecar cannot; its command is orphaned.
		cleanedUp bool
	}{
		{"sidecar killed", func(h *harness) { h.killSidecars() }, false},
		{"connection dropped", func(h *harness) { h.dropConnections() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			env := newPool(t, h).Env(h.target())
			started := make(chan struct{})
			var once sync.Once
			var mu sync.Mutex
			var out strings.Builder
			errc := make(chan error, 1)
			go func() {
				_, err := env.ExecCommand(t.Context(), "echo pids=$PPID,$$; sleep 30", tool.ExecOptions{
					Timeout: time.Minute, OnOutput: func(b []byte) {
						mu.Lock()
						out.Write(b)
						mu.Unlock()
						once.Do(func() { close(started) })
					},
				})
				errc <- err
			}()
			<-started
			tc.drop(h)
			select {
			case err := <-errc:
				if !errors.Is(err, executor.ErrStreamClosed) || !strings.Contains(err.Error(), "in flight") {
					t.Errorf("in-flight call = %v, want ErrStreamClosed", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("in-flight call did not fail after the stream dropped")
			}
			// Neither the old sidecar nor its command outlive the stream.
			var sidecar, command int
			mu.Lock()
			fmt.Sscanf(strings.TrimSpace(out.String()), "pids=%d,%d", &sidecar, &command)
			mu.Unlock()
			if tc.cleanedUp {
				for _, pid := range []int{sidecar, command} {
					if pid == 0 || !gone(pid) {
						t.Errorf("process %d survived the dropped stream (output %q)", pid, out.String())
					}
				}
			} else if command != 0 {
				_ = syscall.Kill(-command, syscall.SIGKILL)
			}
			res, err := env.ExecCommand(t.Context(), "echo again", tool.ExecOptions{})
			if err != nil || res.Stdout != "again\n" {
				t.Fatalf("call after the drop = %+v, %v", res, err)
			}
			if n := h.websocketExecs.Load(); n != 2 {
				t.Errorf("%d streams, want 2 (one reconnect)", n)
			}
		})
	}
}

func TestCancelStopsTheRemoteCommand(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var out strings.Builder
	res, err := env.ExecCommand(ctx, "echo pid=$$; sleep 30", tool.ExecOptions{
		Timeout: time.Minute,
		OnOutput: func(b []byte) {
			mu.Lock()
			defer mu.Unlock()
			out.Write(b)
			if strings.Contains(out.String(), "\n") {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil || !strings.HasPrefix(res.Stdout, "pid=") {
		t.Fatalf("partial result = %+v", res)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(res.Stdout, "pid=")))
	if !gone(pid) {
		t.Errorf("remote command %d still running after cancellation", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The stream survives a cancelled call.
	if ok, err := env.FileExists(t.Context(), "."); !ok || err != nil {
		t.Errorf("call after cancel = %v, %v", ok, err)
	}
}

func TestPoolCloseEndsTheSidecar(t *testing.T) {
	h := newHarness(t)
	p := newPool(t, h)
	env := p.Env(h.target())
	res, err := env.ExecCommand(t.Context(), "echo ppid=$PPID", tool.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sidecar, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(res.Stdout, "ppid=")))
	p.Close()
	if !gone(sidecar) {
		t.Errorf("sidecar %d still running after the pool closed", sidecar)
	}
	if _, err := env.FileExists(t.Context(), "."); !errors.Is(err, executor.ErrStreamClosed) {
		t.Errorf("call after Close = %v, want ErrStreamClosed", err)
	}
}

// gone polls until pid no longer exists (or is a zombie).
func gone(pid int) bool { return proctest.Gone(pid, 10*time.Second) }

func TestPodChecks(t *testing.T) {
	h := newHarness(t)
	pending := runningPod("ns", "pending")
	pending.Status.Phase = corev1.PodPending
	h.addPod(pending)
	stopped := runningPod("ns", "stopped")
	stopped.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	h.addPod(stopped)
	deleting := runningPod("ns", "deleting")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	h.addPod(deleting)

	base := h.target()
	tests := []struct {
		name   string
		mutate func(*Target)
		check  func(error) bool
	}{
		{"wrong label", func(t *Target) { t.Expect.Labels = map[string]string{"agent-operator.dev/session": "other"} }, func(err error) bool { return errors.Is(err, ErrPodMismatch) }},
		{"missing label", func(t *Target) { t.Expect.Labels = map[string]string{"x": "y"} }, func(err error) bool { return errors.Is(err, ErrPodMismatch) }},
		{"wrong owner", func(t *Target) { t.Expect.OwnerUID = "someone-else" }, func(err error) bool { return errors.Is(err, ErrPodMismatch) }},
		{"pending", func(t *Target) { t.Pod = "pending" }, func(err error) bool { return errors.Is(err, ErrPodNotReady) }},
		{"container not running", func(t *Target) { t.Pod = "stopped" }, func(err error) bool { return errors.Is(err, ErrPodNotReady) }},
		{"being deleted", func(t *Target) { t.Pod = "deleting" }, func(err error) bool { return errors.Is(err, ErrPodNotReady) }},
		{"unknown container", func(t *Target) { t.Container = "nope" }, func(err error) bool { return errors.Is(err, ErrPodNotReady) }},
		{"missing pod", func(t *Target) { t.Pod = "gone" }, apierrors.IsNotFound},
	}
	p := newPool(t, h)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := base
			target.Expect.Labels = base.Expect.Labels
			tt.mutate(&target)
			_, err := p.Env(target).FileExists(t.Context(), ".")
			if err == nil || !tt.check(err) {
				t.Errorf("err = %v", err)
			}
		})
	}
	if n := h.websocketExecs.Load() + h.spdyExecs.Load(); n != 0 {
		t.Errorf("%d exec streams opened to pods that failed the checks", n)
	}
}

// TestSharedStreamChecksEachEnv: a second environment of a pod whose stream
// is already open must still pass its own expectations; sharing the stream
// never skips a caller's check.
func TestSharedStreamChecksEachEnv(t *testing.T) {
	h := newHarness(t)
	p := newPool(t, h)
	if _, err := p.Env(h.target()).FileExists(t.Context(), "."); err != nil {
		t.Fatal(err)
	}
	wrong := h.target()
	wrong.Expect.OwnerUID = "someone-else"
	if _, err := p.Env(wrong).FileExists(t.Context(), "."); !errors.Is(err, ErrPodMismatch) {
		t.Fatalf("env with a wrong owner on a shared stream = %v, want ErrPodMismatch", err)
	}
	if _, err := p.Env(h.target()).FileExists(t.Context(), "."); err != nil {
		t.Fatalf("a matching env after the refusal = %v", err)
	}
	if n := h.websocketExecs.Load() + h.spdyExecs.Load(); n != 1 {
		t.Errorf("%d exec streams, want the one shared stream", n)
	}
}

func TestPodIsCheckedBeforeEveryStream(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	if _, err := env.FileExists(t.Context(), "."); err != nil {
		t.Fatal(err)
	}
	// The pod is replaced by one of another owner; the live stream keeps
	// working, but after it drops the new pod is refused.
	other := runningPod("ns", "ws-1")
	other.OwnerReferences[0].UID = "another-session"
	h.addPod(other)
	h.killSidecars()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		_, err = env.FileExists(t.Context(), ".")
		if errors.Is(err, ErrPodMismatch) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the old stream may still be closing
	}
	if !errors.Is(err, ErrPodMismatch) {
		t.Errorf("call after the pod changed owner = %v, want ErrPodMismatch", err)
	}
}

func TestPerCallMode(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h, func(c *Config) { c.Mode = PerCall }).Env(h.target())
	for i := range 3 {
		res, err := env.ExecCommand(t.Context(), fmt.Sprintf("echo %d", i), tool.ExecOptions{})
		if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("call %d = %+v, %v", i, res, err)
		}
	}
	if n := h.websocketExecs.Load(); n != 3 {
		t.Errorf("%d exec streams for 3 calls in per-call mode, want 3", n)
	}
}
