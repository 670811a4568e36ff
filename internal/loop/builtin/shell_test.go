package builtin

import (
	"fmt"
	"strings"
	"testing"
	"time"
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
