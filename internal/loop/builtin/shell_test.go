package builtin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestShell(t *testing.T) {
	env, _ := newEnv(t)
	tests := []struct {
		name     string
		deflt    time.Duration
		max      time.Duration
		args     any
		isError  bool
		has      []string
		lacks    []string
		streamed string
	}{
		{name: "success", args: map[string]any{"command": "echo hello", "description": "greets"},
			has: []string{"Exit code: 0\n", "Output:\nhello\n"}, streamed: "hello"},
		{name: "stdout and stderr combined", args: map[string]any{"command": "printf out; echo err >&2"},
			has: []string{"out\nerr\n"}},
		{name: "non-zero exit is an error result", args: map[string]any{"command": "echo broken; exit 3"},
			isError: true, has: []string{"Exit code: 3", "broken"}},
		{name: "runs in the working directory", args: map[string]any{"command": "touch here && ls"},
			has: []string{"here"}},
		{name: "timeout from timeout_ms", args: map[string]any{"command": "echo before; sleep 30", "timeout_ms": 300},
			isError: true, has: []string{"before\n", "\n" + fmt.Sprintf(TimeoutMessage, 300)}, streamed: "before"},
		{name: "timeout from the default", deflt: 250 * time.Millisecond, args: map[string]any{"command": "sleep 30"},
			isError: true, has: []string{"[ERROR: Command timed out after 250ms. Partial output is shown above.\nYou can retry with a longer timeout by setting the timeout_ms parameter.]"}},
		{name: "timeout_ms capped at the maximum", max: 200 * time.Millisecond, args: map[string]any{"command": "sleep 30", "timeout_ms": 600000},
			isError: true, has: []string{"timed out after 200ms"}},
		{name: "killed by SIGKILL says why it probably was", args: map[string]any{"command": "echo big; kill -9 $$"},
			isError: true, has: []string{"Exit code: 137", "big\n" + KilledMessage}},
		{name: "a plain failure gets no kill message", args: map[string]any{"command": "exit 9"},
			isError: true, has: []string{"Exit code: 9\n"}, lacks: []string{"SIGKILL"}},
		{name: "empty command", args: map[string]any{"command": "  "}, isError: true, has: []string{`"command" parameter is required`}},
		{name: "negative timeout", args: map[string]any{"command": "true", "timeout_ms": -5}, isError: true, has: []string{"timeout_ms must be"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, streamed := call{env: env, deflt: tt.deflt, max: tt.max}.run(t, Shell(OpenAI), tt.args)
			expect(t, res, tt.isError, tt.has...)
			for _, l := range tt.lacks {
				if strings.Contains(res.Output, l) {
					t.Errorf("output contains %q:\n%s", l, res.Output)
				}
			}
			if !strings.Contains(streamed, tt.streamed) {
				t.Errorf("streamed output %q does not contain %q", streamed, tt.streamed)
			}
			if !tt.isError && strings.Contains(res.Output, "timed out") {
				t.Errorf("unexpected timeout message:\n%s", res.Output)
			}
		})
	}
}

func TestCommandTimeout(t *testing.T) {
	tests := []struct {
		name       string
		deflt, max time.Duration
		ms         int
		want       time.Duration
	}{
		{"fallback", 0, 0, 0, 10 * time.Second},
		{"session default", 120 * time.Second, 0, 0, 120 * time.Second},
		{"per call", 10 * time.Second, time.Minute, 1500, 1500 * time.Millisecond},
		{"capped", 10 * time.Second, time.Minute, 3_600_000, time.Minute},
		{"default above max is capped", 2 * time.Minute, time.Minute, 0, time.Minute},
	}
	for _, tt := range tests {
		inv := invocationWithTimeouts(tt.deflt, tt.max)
		if got := commandTimeout(inv, tt.ms); got != tt.want {
			t.Errorf("%s: commandTimeout = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestShellCoalescesSmallWrites runs a command writing one byte per write
// thousands of times: its streamed output arrives in order and complete, as
// at most one delta per StreamFlushBytes plus one per StreamFlushInterval of
// the command's run (plus the last flush), not one per write.
func TestShellCoalescesSmallWrites(t *testing.T) {
	env, _ := newEnv(t)
	const n = 30000
	var want strings.Builder
	for i := range n {
		want.WriteByte(byte('0' + i%10))
	}
	var (
		mu     sync.Mutex
		deltas []string
	)
	inv := &tool.Invocation{
		CallID:    "call-1",
		Name:      "shell",
		Arguments: json.RawMessage(fmt.Sprintf(`{"command":"i=0; while [ $i -lt %d ]; do printf %%s $((i %% 10)); i=$((i+1)); done","timeout_ms":120000}`, n)),
		Env:       env,
		Output: func(d string) {
			mu.Lock()
			deltas = append(deltas, d)
			mu.Unlock()
		},
	}
	start := time.Now()
	res, err := Shell(OpenAI).Executor(t.Context(), inv)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, res, false, "Exit code: 0")
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(deltas, ""); got != want.String() {
		t.Fatalf("streamed %d bytes that differ from the %d written (first 40: %q)", len(got), n, got[:min(40, len(got))])
	}
	limit := n/StreamFlushBytes + int(elapsed/StreamFlushInterval) + 2
	if len(deltas) > limit {
		t.Errorf("%d one-byte writes in %v became %d deltas, want at most %d", n, elapsed, len(deltas), limit)
	}
}

func TestCoalescer(t *testing.T) {
	t.Run("delivers when enough is pending and at close, nothing after", func(t *testing.T) {
		var got []string
		c := newCoalescer(func(s string) { got = append(got, s) }, time.Hour, 4)
		for _, w := range []string{"ab", "c", "", "de", "f"} {
			c.write(w)
		}
		if want := []string{"abcde"}; !slices.Equal(got, want) {
			t.Fatalf("before close: %q, want %q", got, want)
		}
		c.close()
		c.write("late")
		c.close()
		if want := []string{"abcde", "f"}; !slices.Equal(got, want) {
			t.Fatalf("after close: %q, want %q", got, want)
		}
	})
	t.Run("delivers after the interval", func(t *testing.T) {
		ch := make(chan string, 4)
		c := newCoalescer(func(s string) { ch <- s }, time.Millisecond, 1<<20)
		c.write("x")
		c.write("y")
		select {
		case s := <-ch:
			if s != "xy" {
				t.Fatalf("delivered %q, want %q", s, "xy")
			}
		case <-t.Context().Done():
			t.Fatal("nothing delivered after the interval")
		}
		c.close()
		if len(ch) != 0 {
			t.Fatalf("close delivered %q with nothing pending", <-ch)
		}
	})
	t.Run("the cap's marker follows the capped bytes", func(t *testing.T) {
		var got []string
		c := newCoalescer(func(s string) { got = append(got, s) }, time.Hour, 1<<20)
		capped := capStream(10, c.write)
		for range 5 {
			capped([]byte("abcd"))
		}
		c.close()
		want := "abcdabcdab" + fmt.Sprintf(streamCappedMarker, 10)
		if len(got) != 1 || got[0] != want {
			t.Fatalf("delivered %q, want one delta %q", got, want)
		}
	})
}
