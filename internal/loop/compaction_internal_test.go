package loop

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

func TestSplitPointNeverSeparatesACallFromItsResult(t *testing.T) {
	big := strings.Repeat("r", 1000)
	call := func() *AssistantTurn {
		return &AssistantTurn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "read_file"}}}
	}
	results := func() *ToolResultsTurn {
		return &ToolResultsTurn{Results: []llm.ToolResult{{CallID: "c", Content: big}}}
	}
	tests := []struct {
		name string
		hist []Turn
		keep int
		want int
	}{
		{"keeps what fits, starting at a call", []Turn{&UserTurn{Content: "go"}, call(), results(), call(), results(), call(), results()}, 2100, 3},
		{"keeps at least the last round", []Turn{&UserTurn{Content: "go"}, call(), results(), call(), results()}, 10, 3},
		{"a steering turn may start the kept part", []Turn{&UserTurn{Content: "go"}, call(), results(), &SteeringTurn{Content: "s"}, call(), results()}, 1002, 4},
		{"nothing before the last round", []Turn{call(), results()}, 10, 0},
		{"only a previous summary to compact", []Turn{&SummaryTurn{Content: "s"}, call(), results()}, 10, 0},
		{"everything fits: only the first turn goes", []Turn{&UserTurn{Content: "go"}, call(), results()}, 1 << 20, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := splitPoint(tt.hist, tt.keep)
			if got != tt.want {
				t.Fatalf("splitPoint = %d, want %d", got, tt.want)
			}
			if got > 0 {
				if _, ok := tt.hist[got].(*ToolResultsTurn); ok {
					t.Fatalf("the kept part starts with tool results")
				}
			}
		})
	}
}

func TestTranscriptKeepsTheStartAndTheEndWithinTheLimit(t *testing.T) {
	turns := []Turn{&UserTurn{Content: "the task"}}
	for range 50 {
		turns = append(turns, &AssistantTurn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "shell", Arguments: []byte(`{}`)}}},
			&ToolResultsTurn{Results: []llm.ToolResult{{CallID: "c", Name: "shell", Content: strings.Repeat("o", 5000)}}})
	}
	turns = append(turns, &AssistantTurn{Content: "the latest finding"})
	got := transcript(turns, 10_000)
	if len(got) > 10_000+100 {
		t.Errorf("transcript is %d characters, want about the 10000 limit", len(got))
	}
	for _, want := range []string{"USER: the task", "ASSISTANT: the latest finding", "transcript shortened"} {
		if !strings.Contains(got, want) {
			t.Errorf("transcript lacks %q", want)
		}
	}
}
