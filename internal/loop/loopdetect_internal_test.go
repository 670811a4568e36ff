package loop

import (
	"encoding/json"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

func historyOf(names ...string) []Turn {
	var h []Turn
	for _, n := range names {
		h = append(h, &AssistantTurn{ToolCalls: []llm.ToolCall{{Name: n, Arguments: json.RawMessage(`{}`)}}})
		h = append(h, &ToolResultsTurn{})
	}
	return h
}

func TestDetectLoop(t *testing.T) {
	rep := func(pattern []string, n int) []string {
		var out []string
		for len(out) < n {
			out = append(out, pattern...)
		}
		return out[:n]
	}
	tests := []struct {
		name   string
		calls  []string
		window int
		want   bool
	}{
		{"too few calls", rep([]string{"a"}, 9), 10, false},
		{"same call", rep([]string{"a"}, 10), 10, true},
		{"pattern of two", rep([]string{"a", "b"}, 10), 10, true},
		{"pattern of three needs a divisible window", rep([]string{"a", "b", "c"}, 10), 10, false},
		{"pattern of three", rep([]string{"a", "b", "c"}, 9), 9, true},
		{"pattern of four is not checked", rep([]string{"a", "b", "c", "d"}, 12), 12, false},
		{"only the last window counts", append([]string{"x", "y"}, rep([]string{"a"}, 10)...), 10, true},
		{"broken pattern", append(rep([]string{"a"}, 9), "b"), 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := detectLoop(historyOf(tt.calls...), tt.window); got != tt.want {
				t.Errorf("detectLoop() = %v, want %v", got, tt.want)
			}
		})
	}
	// Different arguments give different signatures.
	h := historyOf("a", "a", "a")
	h[2].(*AssistantTurn).ToolCalls[0].Arguments = json.RawMessage(`{"x":1}`)
	if detectLoop(h, 3) {
		t.Error("calls with different arguments counted as a loop")
	}
}

func TestAsksQuestion(t *testing.T) {
	for text, want := range map[string]bool{
		"Which file?":             true,
		"Should I continue?  \n":  true,
		"Done.":                   false,
		"Is it done? I fixed it.": false,
		"":                        false,
	} {
		if got := asksQuestion(text); got != want {
			t.Errorf("asksQuestion(%q) = %v", text, got)
		}
	}
}
