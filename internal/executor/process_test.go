package executor

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
)

// When EXECUTOR_TEST_SERVE_ROOT is set, the test binary is a real executor
// server process speaking the protocol on stdin/stdout.
func TestMain(m *testing.M) {
	if root := os.Getenv("EXECUTOR_TEST_SERVE_ROOT"); root != "" {
		env, err := localenv.New(root, localenv.WithKillGrace(200*time.Millisecond))
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		if err := Serve(context.Background(), os.Stdin, os.Stdout, env, ServeOptions{}); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type procConn struct {
	io.ReadCloser
	io.WriteCloser
}

func (p procConn) Close() error {
	p.WriteCloser.Close()
	return p.ReadCloser.Close()
}

func startProcess(t *testing.T) (*exec.Cmd, *Client, string) {
	t.Helper()
	root := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "EXECUTOR_TEST_SERVE_ROOT="+root)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Error("server process did not exit after its stdin closed")
		}
	})
	c, err := NewClientContext(t.Context(), procConn{stdout, stdin})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return cmd, c, root
}

func TestClientOverChildProcess(t *testing.T) {
	_, c, root := startProcess(t)
	if c.WorkingDirectory() != root {
		t.Errorf("WorkingDirectory = %q, want %q", c.WorkingDirectory(), root)
	}
	exercise(t, c)
}

func TestChildProcessKilledMidCall(t *testing.T) {
	cmd, c, _ := startProcess(t)
	errc := startInFlight(t, c)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if !errors.Is(err, ErrStreamClosed) {
		t.Errorf("in-flight call = %v, want ErrStreamClosed", err)
	}
	if _, err := c.Glob(t.Context(), "*", ""); !errors.Is(err, ErrStreamClosed) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("call after the process died = %v, want ErrStreamClosed", err)
	}
}
