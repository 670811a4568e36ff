package executor

import (
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/builtin"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// countedClient is a client of s whose incoming bytes are counted.
func countedClient(t *testing.T, s *served, opts ...ClientOption) (*Client, *countingReader) {
	t.Helper()
	in := &countingReader{r: s.client}
	s.client = &duplex{Reader: in, Writer: s.client, closers: []io.Closer{s.client}}
	return newClient(t, s, opts...), in
}

// TestExecStreamLimitStopsOutputFrames: past the stream limit of an exec
// call the server sends no more output frames (a server without the feature
// sends them all and the client drops them), and the call still ends with
// the command's exit status.
func TestExecStreamLimitStopsOutputFrames(t *testing.T) {
	const (
		limit   = 64 << 10
		written = 8 << 20
	)
	tests := []struct {
		name     string
		without  []string
		wireMin  int64 // bytes the client reads during the call, at least
		wireMax  int64 // and at most
		announce bool
	}{
		{name: "server with the limit", wireMax: 1 << 20, announce: true},
		{name: "server predating the limit", without: []string{FeatureStreamLimit}, wireMin: written},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serve(t, ServeOptions{WithoutFeatures: tt.without}, localenv.WithMaxOutput(64<<10))
			c, in := countedClient(t, s, WithStreamLimit(limit))
			if got := c.ServerInfo().HasFeature(FeatureStreamLimit); got != tt.announce {
				t.Fatalf("hello announces %s: %v, want %v", FeatureStreamLimit, got, tt.announce)
			}
			var delivered int
			before := in.n.Load()
			res, err := c.ExecCommand(t.Context(), "head -c 8388608 /dev/zero; exit 7", tool.ExecOptions{
				OnOutput: func(chunk []byte) { delivered += len(chunk) },
			})
			wire := in.n.Load() - before
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 7 {
				t.Errorf("exit code %d, want 7", res.ExitCode)
			}
			if delivered != limit {
				t.Errorf("delivered %d streamed bytes, want the limit %d", delivered, limit)
			}
			if wire < tt.wireMin || (tt.wireMax > 0 && wire > tt.wireMax) {
				t.Errorf("the call read %d bytes from the stream, want %d to %d", wire, tt.wireMin, tt.wireMax)
			}
		})
	}
}

// TestShellOverClientStopsStreamingPastItsCap: the shell tool over a client
// with the default limit still streams its cap and marker, and the output
// past the default limit never crosses the stream.
func TestShellOverClientStopsStreamingPastItsCap(t *testing.T) {
	s := serve(t, ServeOptions{}, localenv.WithMaxOutput(64<<10))
	c, in := countedClient(t, s)
	var (
		mu       sync.Mutex
		streamed strings.Builder
	)
	inv := &tool.Invocation{
		CallID: "call-1", Name: "shell", Env: c,
		Arguments: []byte(`{"command":"head -c 16777216 /dev/zero | tr '\\0' a","timeout_ms":120000}`),
		Output: func(d string) {
			mu.Lock()
			streamed.WriteString(d)
			mu.Unlock()
		},
	}
	before := in.n.Load()
	res, err := builtin.Shell(builtin.OpenAI).Executor(t.Context(), inv)
	wire := in.n.Load() - before
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(res.Output, "Exit code: 0") {
		t.Fatalf("result %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	got := streamed.String()
	if !strings.HasPrefix(got, strings.Repeat("a", builtin.MaxStreamBytes)) || !strings.Contains(got, "streamed output capped") {
		t.Errorf("streamed %d bytes without the cap's %d bytes and marker", len(got), builtin.MaxStreamBytes)
	}
	// Output frames carry their bytes base64-encoded (4/3), plus frames'
	// envelopes and the result; 16 MiB were written.
	if max := int64(DefaultStreamLimit)*4/3 + 1<<20; wire > max {
		t.Errorf("the call read %d bytes from the stream, want at most %d", wire, max)
	}
}
