package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

var binary string

func TestMain(m *testing.M) {
	bin, cleanup, err := proctest.Build(".", BinaryName)
	if err != nil {
		panic(err)
	}
	binary = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

func TestVersionAndUsage(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), fmt.Sprintf("executor-sidecar dev (protocol %d", executor.Version)) {
		t.Errorf("version = %q, %v", out, err)
	}
	err = exec.Command(binary, "bogus").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("unknown command exit = %v, want 2", err)
	}
}

func TestCopyTo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agent", "bin")
	if out, err := exec.Command(binary, "copy-to", dir).CombinedOutput(); err != nil {
		t.Fatalf("copy-to: %v: %s", err, out)
	}
	installed := filepath.Join(dir, BinaryName)
	st, err := os.Stat(installed)
	if err != nil || st.Mode().Perm() != 0o111 {
		t.Fatalf("installed binary: %v, %v; want mode 0111 (executable, readable by no one)", st, err)
	}
	if err := os.Chmod(installed, 0o500); err != nil { // to compare it
		t.Fatal(err)
	}
	a, _ := os.ReadFile(binary)
	b, _ := os.ReadFile(installed)
	if !bytes.Equal(a, b) {
		t.Error("installed binary differs from the original")
	}
	out, err := exec.Command(installed, "version").Output()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("protocol %d", executor.Version)) {
		t.Errorf("installed binary version = %q, %v", out, err)
	}
}

// The test signals only after idle said its handlers are installed: a
// SIGTERM before that would kill it with the default action (seen on a
// loaded 2-core machine), which is not what the test is about.
func TestIdleExitsZeroOnSIGTERM(t *testing.T) {
	cmd := exec.Command(binary, "idle")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != IdleReady {
		_ = cmd.Process.Kill()
		t.Fatalf("first line %q (%v), want %q", line, err, IdleReady)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("idle exited with %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("idle did not exit on SIGTERM")
	}
}

func TestIdleReapsOrphans(t *testing.T) {
	// bash starts a short-lived child and then becomes `idle`, which thereby
	// inherits the child and must reap it when it exits.
	cmd := exec.Command("/bin/bash", "-c", `sleep 0.2 & echo $!; exec "$0" idle`, binary)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	if _, err := fmt.Fscan(stdout, &pid); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		if os.IsNotExist(err) {
			return // reaped
		}
		if time.Now().After(deadline) {
			state, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Fatalf("child %d of idle not reaped: %s", pid, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type conn struct {
	io.ReadCloser
	io.WriteCloser
}

func (c conn) Close() error { c.WriteCloser.Close(); return c.ReadCloser.Close() }

func TestServe(t *testing.T) {
	root := t.TempDir()
	cmd := exec.Command(binary, "serve", "--root", root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "SIDECAR_TEST_TOKEN=secret-value")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := executor.NewClientContext(t.Context(), conn{stdout, stdin})
	if err != nil {
		t.Fatalf("handshake with the sidecar: %v (stderr: %s)", err, stderr.String())
	}
	ctx := t.Context()
	if c.WorkingDirectory() != root {
		t.Errorf("WorkingDirectory = %q, want %q", c.WorkingDirectory(), root)
	}
	if err := c.WriteFile(ctx, "a/b.txt", []byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "a/b.txt")); string(got) != "hi\n" {
		t.Errorf("file content %q", got)
	}
	res, err := c.ExecCommand(ctx, `cat a/b.txt; echo "token=[$SIDECAR_TEST_TOKEN]"`, tool.ExecOptions{})
	if err != nil || res.Stdout != "hi\ntoken=[]\n" {
		t.Errorf("exec = %+v, %v", res, err)
	}
	if _, err := c.ReadFile(ctx, "/etc/hostname", tool.ReadOptions{}); !errors.Is(err, tool.ErrPathEscapes) {
		t.Errorf("read outside root = %v, want ErrPathEscapes", err)
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve exited with %v after stdin closed (stderr: %s)", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "serving") {
		t.Errorf("no log on stderr: %q", stderr.String())
	}
}

// Two serve processes of one pod share --owner-dir: once a newer driver of
// a session used the second, the first's stream of the older driver has its
// next call refused, and a hello of the older driver is refused too (that
// serve process exits with an error saying why).
func TestServeProcessesShareOwnerRecords(t *testing.T) {
	root, owners := t.TempDir(), filepath.Join(t.TempDir(), "owners")
	start := func(o executor.Owner) (*executor.Client, *exec.Cmd, *bytes.Buffer, error) {
		cmd := exec.Command(binary, "serve", "--root", root, "--owner-dir", owners)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		c, err := executor.NewClientContext(t.Context(), conn{stdout, stdin}, executor.WithOwner(o))
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, cmd, &stderr, err
	}
	old := executor.Owner{SessionUID: "uid-1", Holder: "ns-a/ao/ao-1", Epoch: 1}
	newer := executor.Owner{SessionUID: "uid-1", Holder: "ns-b/ao/ao-2", Epoch: 2}
	oc, _, _, err := start(old)
	if err != nil {
		t.Fatalf("older driver: %v", err)
	}
	if _, err := oc.FileExists(t.Context(), "."); err != nil {
		t.Fatalf("older driver before the takeover: %v", err)
	}
	nc, _, _, err := start(newer)
	if err != nil {
		t.Fatalf("newer driver: %v", err)
	}
	if _, err := nc.FileExists(t.Context(), "."); err != nil {
		t.Fatalf("newer driver: %v", err)
	}
	if _, err := oc.FileExists(t.Context(), "."); !errors.Is(err, executor.ErrNotOwner) {
		t.Errorf("older driver after the takeover = %v, want ErrNotOwner", err)
	}
	_, cmd, stderr, err := start(old)
	if !errors.Is(err, executor.ErrNotOwner) {
		t.Fatalf("older driver's new stream = %v, want ErrNotOwner", err)
	}
	if werr := cmd.Wait(); werr == nil || !strings.Contains(stderr.String(), "superseded") {
		t.Errorf("refused serve exited with %v, stderr %q; want an error naming the refusal", werr, stderr.String())
	}
	if st, err := os.Stat(owners); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("owner directory %v, %v; want created with mode 0700", st, err)
	}
}
