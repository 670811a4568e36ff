package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
	"github.com/agent-operator/agent-operator/internal/proctest"
)

// mcpServerBin is test/mcpserver, built once by TestMain.
var mcpServerBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := proctest.Build("github.com/agent-operator/agent-operator/test/mcpserver", "mcpserver")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mcpServerBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// starters run the stdio test server (with flags after -stdio) on this
// machine and in a workspace behind a real executor stream.
func starters(t *testing.T, flags ...string) map[string]func(ctx context.Context) (io.ReadWriteCloser, error) {
	t.Helper()
	argv := append([]string{mcpServerBin, "-stdio"}, flags...)
	local, err := localenv.New(t.TempDir(), localenv.WithKillGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })

	ws, err := localenv.New(t.TempDir(), localenv.WithKillGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = executor.Serve(context.Background(), sr, sw, ws, executor.ServeOptions{})
		sw.Close()
	}()
	client, err := executor.NewClientContext(t.Context(), pipePair{cr, cw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); <-served })
	return map[string]func(ctx context.Context) (io.ReadWriteCloser, error){
		"local process": func(ctx context.Context) (io.ReadWriteCloser, error) {
			return local.StartStdio(ctx, argv, nil, "")
		},
		"over the executor stream": func(ctx context.Context) (io.ReadWriteCloser, error) {
			return client.StartStdio(ctx, argv, nil, "")
		},
	}
}

type pipePair struct {
	*io.PipeReader
	*io.PipeWriter
}

func (p pipePair) Close() error {
	p.PipeReader.Close()
	return p.PipeWriter.Close()
}

func TestStdioServer(t *testing.T) {
	for name, start := range starters(t) {
		t.Run(name, func(t *testing.T) {
			c, err := mcp.Connect(t.Context(), mcp.Server{Name: "local", Start: start, Command: []string{"mcpserver", "-stdio"},
				DeniedTools: []string{mcptest.Slow}, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := names(c.Tools())
			slices.Sort(got)
			want := []string{"mcp__local__crash", "mcp__local__echo", "mcp__local__fail", "mcp__local__get_weather"}
			if !slices.Equal(got, want) {
				t.Fatalf("tools = %v, want %v", got, want)
			}
			reg := tool.NewRegistry()
			for _, tl := range c.Tools() {
				if err := reg.Register(tl); err != nil {
					t.Fatal(err)
				}
			}
			call := func(name, args string) (tool.Result, error) {
				r, _ := reg.Get(name)
				return r.Executor(t.Context(), &tool.Invocation{Name: name, Arguments: json.RawMessage(args)})
			}
			res, err := call("mcp__local__echo", `{"text":"hi"}`)
			if err != nil || res.Output != "echo: hi" || res.IsError {
				t.Errorf("echo = %+v, %v", res, err)
			}
			res, err = call("mcp__local__fail", `{}`)
			if err != nil || !res.IsError || res.Output != "the thing is broken" {
				t.Errorf("fail = %+v, %v", res, err)
			}

			// The server dies mid-call: that call and every later one say so.
			_, err = call("mcp__local__crash", `{}`)
			if err == nil {
				t.Fatal("crash call succeeded")
			}
			for _, want := range []string{"mcp server local, tool crash", "the server's process has stopped", "exited with code 3", "crashing as the crash tool asks"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("crash error %q does not say %q", err, want)
				}
			}
			_, err = call("mcp__local__echo", `{"text":"again"}`)
			if err == nil || !strings.Contains(err.Error(), "mcp server local, tool echo") || !strings.Contains(err.Error(), "exited with code 3") {
				t.Errorf("call after the crash = %v, want an error naming the server, tool and exit", err)
			}
		})
	}
}

func TestStdioServerFailsToStart(t *testing.T) {
	local, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	tests := []struct {
		name string
		argv []string
		want []string
	}{
		{name: "missing command", argv: []string{"/no/such/server"},
			want: []string{"start mcp server s (command /no/such/server)", "no such file"}},
		{name: "exits before answering", argv: []string{"sh", "-c", "echo bad config >&2; exit 2"},
			want: []string{"connect to mcp server s (command sh -c", "exited with code 2", "bad config"}},
		// The client's first write fails (broken pipe) before the process has
		// exited: the error still says how it ended (CI once saw only
		// "broken pipe" when the process won that race).
		{name: "closes its stdin, then exits", argv: []string{"sh", "-c", "exec 0<&-; sleep 0.3; echo bad config >&2; exit 2"},
			want: []string{"connect to mcp server s (command sh -c", "exited with code 2", "bad config"}},
		{name: "not an MCP server", argv: []string{"echo", "hello"},
			want: []string{"connect to mcp server s (command echo hello)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mcp.Connect(t.Context(), mcp.Server{Name: "s", Command: tt.argv, Timeout: 10 * time.Second,
				Start: func(ctx context.Context) (io.ReadWriteCloser, error) { return local.StartStdio(ctx, tt.argv, nil, "") }})
			if err == nil {
				t.Fatal("Connect succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
