package executor

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

// duplex joins a reader and a writer into an io.ReadWriteCloser.
type duplex struct {
	io.Reader
	io.Writer
	closers []io.Closer
}

func (d *duplex) Close() error {
	for _, c := range d.closers {
		c.Close()
	}
	return nil
}

// served is a server running over io.Pipes.
type served struct {
	env    *localenv.Env
	root   string
	done   chan error
	kill   func() // breaks the stream from the server side
	client io.ReadWriteCloser
}

func serve(t testing.TB, opts ServeOptions, envOpts ...localenv.Option) *served {
	t.Helper()
	root := t.TempDir()
	env, err := localenv.New(root, envOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	s := &served{env: env, root: root, done: make(chan error, 1)}
	s.client = &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}}
	s.kill = func() {
		sw.CloseWithError(errors.New("server gone"))
		sr.CloseWithError(errors.New("server gone"))
	}
	go func() {
		err := Serve(context.Background(), sr, sw, env, opts)
		sw.Close()
		s.done <- err
	}()
	t.Cleanup(func() {
		s.client.Close()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client closed")
		}
	})
	return s
}

func newClient(t testing.TB, s *served, opts ...ClientOption) *Client {
	t.Helper()
	c, err := NewClientContext(t.Context(), s.client, opts...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// processGone polls until pid no longer exists (or is a zombie).
func processGone(pid int) bool { return proctest.Gone(pid, 5*time.Second) }

// exercise runs every operation against env and checks the answers; root
// is the host directory behind env's working directory.
func exercise(t *testing.T, env tool.ExecutionEnvironment) {
	t.Helper()
	ctx := t.Context()
	if err := env.Initialize(ctx); err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	if err := env.WriteFile(ctx, "dir/a.txt", []byte("one\ntwo\nthree\n")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	fc, err := env.ReadFile(ctx, "dir/a.txt", tool.ReadOptions{Offset: 2, Limit: 1})
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	if string(fc.Content) != "two\n" || fc.TotalLines != 3 || fc.Size != 14 || fc.Binary {
		t.Errorf("ReadFile = %+v", fc)
	}
	if err := env.WriteFile(ctx, "img.png", []byte("\x89PNG\r\n\x1a\n\x00\x01")); err != nil {
		t.Fatal(err)
	}
	fc, err = env.ReadFile(ctx, "img.png", tool.ReadOptions{})
	if err != nil || fc.MediaType != "image/png" || !fc.Binary || len(fc.Content) != 10 {
		t.Errorf("ReadFile(png) = %+v, %v", fc, err)
	}
	if ok, err := env.FileExists(ctx, "dir/a.txt"); !ok || err != nil {
		t.Errorf("FileExists = %v, %v", ok, err)
	}
	if ok, err := env.FileExists(ctx, "nope"); ok || err != nil {
		t.Errorf("FileExists(nope) = %v, %v", ok, err)
	}
	ents, err := env.ListDirectory(ctx, ".", 2)
	if err != nil || len(ents) != 3 || ents[0] != (tool.DirEntry{Name: "dir", IsDir: true}) || ents[1] != (tool.DirEntry{Name: "dir/a.txt", Size: 14}) {
		t.Errorf("ListDirectory = %+v, %v", ents, err)
	}
	gr, err := env.Grep(ctx, "T(W|H)", ".", tool.GrepOptions{CaseInsensitive: true})
	if err != nil || len(gr.Matches) != 2 || gr.Matches[0] != (tool.GrepMatch{Path: "dir/a.txt", Line: 2, Text: "two"}) {
		t.Errorf("Grep = %+v, %v", gr, err)
	}
	paths, err := env.Glob(ctx, "**/*.txt", "")
	if err != nil || len(paths) != 1 || paths[0] != "dir/a.txt" {
		t.Errorf("Glob = %q, %v", paths, err)
	}
	var streamed strings.Builder
	res, err := env.ExecCommand(ctx, "cat a.txt; echo oops >&2; exit 4", tool.ExecOptions{
		WorkingDir: "dir", OnOutput: func(b []byte) { streamed.Write(b) },
	})
	if err != nil {
		t.Fatalf("ExecCommand: %v", err)
	}
	if res.Stdout != "one\ntwo\nthree\n" || res.Stderr != "oops\n" || res.ExitCode != 4 || res.TimedOut || res.Duration <= 0 {
		t.Errorf("ExecCommand = %+v", res)
	}
	if !strings.Contains(streamed.String(), "three") || !strings.Contains(streamed.String(), "oops") {
		t.Errorf("OnOutput got %q", streamed.String())
	}
	res, err = env.ExecCommand(ctx, "echo start; sleep 30", tool.ExecOptions{Timeout: time.Second})
	if err != nil || !res.TimedOut || res.Stdout != "start\n" {
		t.Errorf("ExecCommand with timeout = %+v, %v", res, err)
	}
	if err := env.DeleteFile(ctx, "dir/a.txt"); err != nil {
		t.Errorf("DeleteFile: %v", err)
	}
	if _, err := env.ReadFile(ctx, "dir/a.txt", tool.ReadOptions{}); !errors.Is(err, tool.ErrNotFound) {
		t.Errorf("ReadFile after delete = %v, want ErrNotFound", err)
	}
	for _, p := range []string{"../x", "/etc/passwd"} {
		if _, err := env.ReadFile(ctx, p, tool.ReadOptions{}); !errors.Is(err, tool.ErrPathEscapes) {
			t.Errorf("ReadFile(%q) = %v, want ErrPathEscapes", p, err)
		}
		if err := env.WriteFile(ctx, p, []byte("x")); !errors.Is(err, tool.ErrPathEscapes) {
			t.Errorf("WriteFile(%q) = %v, want ErrPathEscapes", p, err)
		}
	}
	if err := env.Cleanup(ctx); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
	if env.Platform() != "linux" || env.OSVersion() == "" || env.WorkingDirectory() == "" {
		t.Errorf("metadata: %q %q %q", env.Platform(), env.OSVersion(), env.WorkingDirectory())
	}
}

// startInFlight starts a long command on c and returns once it has produced
// output, with a channel that receives the call's error.
func startInFlight(t *testing.T, c *Client) <-chan error {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := c.ExecCommand(t.Context(), "echo go; sleep 30", tool.ExecOptions{
			Timeout: time.Minute, OnOutput: func([]byte) { once.Do(func() { close(started) }) },
		})
		errc <- err
	}()
	<-started
	return errc
}
