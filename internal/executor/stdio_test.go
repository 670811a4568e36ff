package executor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func stdioClient(t *testing.T, so ServeOptions, opts ...ClientOption) (*Client, string) {
	t.Helper()
	s := serve(t, so, localenv.WithKillGrace(200*time.Millisecond))
	return newClient(t, s, opts...), s.root
}

func startStdio(t *testing.T, c *Client, argv []string, env map[string]string, dir string) *StdioStream {
	t.Helper()
	s, err := c.StartStdio(t.Context(), argv, env, dir)
	if err != nil {
		t.Fatalf("StartStdio(%q): %v", argv, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStdioRoundTrip(t *testing.T) {
	c, root := stdioClient(t, ServeOptions{})
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		argv  []string
		env   map[string]string
		dir   string
		input string
		want  string
	}{
		{name: "cat echoes stdin", argv: []string{"cat"}, input: "hello\nworld\n", want: "hello\nworld\n"},
		{name: "env and working directory", argv: []string{"sh", "-c", `echo "$FOO"; basename "$(pwd)"; cat`},
			env: map[string]string{"FOO": "bar"}, dir: "sub", input: "in\n", want: "bar\nsub\nin\n"},
		{name: "large input", argv: []string{"cat"}, input: strings.Repeat("x", 2<<20), want: strings.Repeat("x", 2<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startStdio(t, c, tt.argv, tt.env, tt.dir)
			if s.Pid() <= 0 {
				t.Errorf("Pid = %d", s.Pid())
			}
			errc := make(chan error, 1)
			go func() {
				_, err := io.WriteString(s, tt.input)
				if err == nil {
					err = s.CloseWrite()
				}
				errc <- err
			}()
			got, err := io.ReadAll(s) // ReadAll stops at io.EOF only
			var exit *StdioExitError
			if !errors.As(err, &exit) || exit.ExitCode != 0 || !errors.Is(err, io.EOF) {
				t.Errorf("read error = %v, want a clean exit", err)
			}
			if string(got) != tt.want {
				t.Errorf("stdout = %.80q (%d bytes), want %.80q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			if err := <-errc; err != nil {
				t.Errorf("write: %v", err)
			}
		})
	}
}

func TestStdioProcessExitsMidCall(t *testing.T) {
	c, _ := stdioClient(t, ServeOptions{})
	s := startStdio(t, c, []string{"sh", "-c", `read line; echo "partial $line"; echo "boom: $line" >&2; exit 3`}, nil, "")
	if _, err := io.WriteString(s, "req\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(s)
	line, err := r.ReadString('\n')
	if err != nil || line != "partial req\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	_, err = r.ReadString('\n')
	var exit *StdioExitError
	if !errors.As(err, &exit) || exit.ExitCode != 3 || errors.Is(err, io.EOF) {
		t.Fatalf("read after exit = %v, want exit code 3", err)
	}
	for _, want := range []string{"exited with code 3", "boom: req", "sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := io.WriteString(s, "more\n"); err == nil || !strings.Contains(err.Error(), "exited with code 3") {
		t.Errorf("write after exit = %v, want the exit error", err)
	}
	// The connection is still usable.
	if _, err := c.FileExists(t.Context(), "x"); err != nil {
		t.Errorf("call after the process exited: %v", err)
	}
}

func TestStdioFloodIsBounded(t *testing.T) {
	const limit = 1 << 20
	c, _ := stdioClient(t, ServeOptions{}, WithStdioBuffer(limit))
	s := startStdio(t, c, []string{"sh", "-c", "while :; do echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; done"}, nil, "")
	// Nobody reads: the client stops the process once its buffer is full.
	select {
	case <-s.final:
	case <-time.After(30 * time.Second):
		t.Fatal("the flooding process was not stopped")
	}
	s.mu.Lock()
	buffered := len(s.buf)
	s.mu.Unlock()
	if buffered > limit {
		t.Errorf("%d bytes buffered, limit %d", buffered, limit)
	}
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, ErrStdioOverflow) {
		t.Errorf("Read = %v, want ErrStdioOverflow", err)
	}
	if !processGone(s.Pid()) {
		t.Errorf("process %d still runs", s.Pid())
	}
	if _, err := c.FileExists(t.Context(), "x"); err != nil {
		t.Errorf("call after the overflow: %v", err)
	}
}

func TestStdioUnreadStdinIsBounded(t *testing.T) {
	c, _ := stdioClient(t, ServeOptions{MaxStdinQueue: 1 << 20})
	s := startStdio(t, c, []string{"sleep", "300"}, nil, "")
	_, err := s.Write(bytes.Repeat([]byte("y"), 3<<20))
	if err == nil {
		// The last frames may have left before the executor gave up.
		select {
		case <-s.final:
		case <-time.After(30 * time.Second):
			t.Fatal("the executor did not stop a process that does not read its stdin")
		}
	}
	_, err = s.Read(make([]byte, 1))
	if !errors.Is(err, localenv.ErrTooLarge) || !strings.Contains(err.Error(), "did not read its stdin") {
		t.Errorf("Read = %v, want a too_large error about stdin", err)
	}
	if !processGone(s.Pid()) {
		t.Errorf("process %d still runs", s.Pid())
	}
}

func TestStdioCloseKillsProcessGroup(t *testing.T) {
	c, _ := stdioClient(t, ServeOptions{})
	s := startStdio(t, c, []string{"sh", "-c", `trap "" TERM; sleep 300 & echo $!; wait`}, nil, "")
	line, err := bufio.NewReader(s).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{s.Pid(), child} {
		if !processGone(pid) {
			t.Errorf("process %d still runs after Close", pid)
		}
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, ErrStdioClosed) {
		t.Errorf("Read after Close = %v, want ErrStdioClosed", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrStdioClosed) {
		t.Errorf("Write after Close = %v, want ErrStdioClosed", err)
	}
}

func TestStdioEndsWithTheStream(t *testing.T) {
	srv := serve(t, ServeOptions{}, localenv.WithKillGrace(200*time.Millisecond))
	c := newClient(t, srv)
	s := startStdio(t, c, []string{"sleep", "300"}, nil, "")
	srv.kill()
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Read = %v, want ErrStreamClosed", err)
	}
	if !processGone(s.Pid()) {
		t.Errorf("process %d outlived its stream", s.Pid())
	}
}

func TestStdioStartErrors(t *testing.T) {
	c, _ := stdioClient(t, ServeOptions{})
	tests := []struct {
		name string
		argv []string
		dir  string
		want string
		is   error
	}{
		{name: "missing binary", argv: []string{"/no/such/binary"}, want: "no such file"},
		{name: "working directory escapes", argv: []string{"cat"}, dir: "../..", is: tool.ErrPathEscapes},
		{name: "empty argv", argv: []string{}, want: "empty command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := c.StartStdio(t.Context(), tt.argv, nil, tt.dir)
			if err == nil {
				s.Close()
				t.Fatal("StartStdio succeeded")
			}
			if tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

// oldEnv serves like an executor that predates stdio processes: its
// environment cannot start them, so the op is unknown to it.
type oldEnv struct{ tool.ExecutionEnvironment }

func TestStdioOldExecutor(t *testing.T) {
	env, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Serve(context.Background(), sr, sw, oldEnv{env}, ServeOptions{})
		sw.Close()
	}()
	c, err := NewClientContext(t.Context(), &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); <-done })
	_, err = c.StartStdio(t.Context(), []string{"cat"}, nil, "")
	if !errors.Is(err, ErrStdioUnsupported) || !strings.Contains(err.Error(), "update the executor image") {
		t.Errorf("StartStdio on an old executor = %v, want ErrStdioUnsupported", err)
	}
	if _, err := c.FileExists(t.Context(), "x"); err != nil {
		t.Errorf("call after the refusal: %v", err)
	}
}
