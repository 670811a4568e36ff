package render

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

var t0 = time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)

func ev(kind loop.EventKind, d loop.EventData) loop.Event {
	return loop.Event{Kind: kind, Time: t0, Data: d}
}

func TestRenderer(t *testing.T) {
	turn := []loop.Event{
		ev(loop.EventSessionStart, loop.EventData{State: "IDLE"}),
		ev(loop.EventUserInput, loop.EventData{Content: "fix the bug\nin main.go"}),
		ev(loop.EventAssistantTextStart, loop.EventData{}),
		ev(loop.EventAssistantTextDelta, loop.EventData{Delta: "Running "}),
		ev(loop.EventAssistantTextDelta, loop.EventData{Delta: "tests"}),
		ev(loop.EventAssistantTextEnd, loop.EventData{Text: "Running tests", Usage: &llm.Usage{InputTokens: 10, OutputTokens: 2}}),
		ev(loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: "c1", Arguments: json.RawMessage(`{"command": "go test ./..."}`)}),
		ev(loop.EventToolCallOutputDelta, loop.EventData{CallID: "c1", Delta: "a\nb\n"}),
		ev(loop.EventToolCallOutputDelta, loop.EventData{CallID: "c1", Delta: "c\n"}),
		ev(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "c1", Output: "a\nb\nc\n", DurationMs: 1500}),
		ev(loop.EventToolCallEnd, loop.EventData{ToolName: "read_file", CallID: "c2", Error: "no such file", IsError: true}),
		ev(loop.EventWarning, loop.EventData{Message: "context 85% full"}),
		ev(loop.EventSessionEnd, loop.EventData{State: "CLOSED"}),
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"replay", Options{}, `● session started (IDLE)
▶ user: fix the bug
    in main.go
◆ assistant: Running tests
    tokens: 10 in, 2 out
⚙ shell {"command": "go test ./..."}
✓ shell (1.5s)
    │ a
    │ b
    │ c
✗ read_file
    │ no such file
! warning: context 85% full
■ session ended (CLOSED)
`},
		{"live deltas, cut output, timestamps", Options{Deltas: true, MaxOutputLines: 2, Timestamps: true}, `01:02:03 ● session started (IDLE)
01:02:03 ▶ user: fix the bug
    in main.go
01:02:03 ◆ assistant: Running tests
    tokens: 10 in, 2 out
01:02:03 ⚙ shell {"command": "go test ./..."}
    │ a
    │ b
01:02:03 ✓ shell (1.5s)
    │ … 1 more lines
01:02:03 ✗ read_file
    │ no such file
01:02:03 ! warning: context 85% full
01:02:03 ■ session ended (CLOSED)
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			r := New(&b, tt.opts)
			for _, e := range turn {
				if err := r.Event(e); err != nil {
					t.Fatal(err)
				}
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestUnescapeHTML(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"command":"sleep 2 \u0026\u0026 echo a \u003e\u003e log"}`, `{"command":"sleep 2 && echo a >> log"}`},
		{`{"html":"\u003cb\u003E"}`, `{"html":"<b>"}`},
		{`{"literal":"\\u0026"}`, `{"literal":"\\u0026"}`},
		{`{"other":"\u00e9 \n \""}`, `{"other":"\u00e9 \n \""}`},
		{`{"cut":"\u00`, `{"cut":"\u00`},
		{`no escapes`, `no escapes`},
	}
	for _, tt := range tests {
		if got := unescapeHTML(tt.in); got != tt.want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	var b strings.Builder
	args, _ := json.Marshal(map[string]string{"command": "a && b > c"})
	if err := New(&b, Options{}).Event(ev(loop.EventToolCallStart, loop.EventData{ToolName: "shell", Arguments: args})); err != nil {
		t.Fatal(err)
	}
	if want := "⚙ shell {\"command\":\"a && b > c\"}\n"; b.String() != want {
		t.Errorf("rendered %q, want %q", b.String(), want)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("closed pipe") }

func TestRendererReportsWriteError(t *testing.T) {
	r := New(failWriter{}, Options{})
	if err := r.Event(ev(loop.EventUserInput, loop.EventData{Content: "x"})); err == nil {
		t.Error("no error from a failing writer")
	}
}
