package render

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
)

func TestRendererShowsPlanAndCompaction(t *testing.T) {
	tests := []struct {
		name string
		ev   loop.Event
		want string
	}{
		{"plan", ev(loop.EventPlanUpdated, loop.EventData{Plan: []loop.PlanItem{
			{Content: "read the code", Status: loop.PlanCompleted}, {Content: "fix it", Status: loop.PlanInProgress},
			{Content: "test it", Status: loop.PlanPending}}}),
			"≡ Plan (1/3 done):\n    [x] read the code\n    [>] fix it\n    [ ] test it\n"},
		{"compaction", ev(loop.EventContextCompacted, loop.EventData{DurationMs: 2100,
			Compaction: &loop.Compaction{TokensBefore: 120000, TokensAfter: 30000, Turns: 40}}),
			"⇢ context compacted: ~120000 → ~30000 tokens (40 turns summarized, 2.1s)\n"},
		{"forced, dropped", ev(loop.EventContextCompacted, loop.EventData{
			Compaction: &loop.Compaction{TokensBefore: 9, TokensAfter: 1, Turns: 3, Dropped: true, Forced: true}}),
			"⇢ context compacted after the provider rejected the request as too long: ~9 → ~1 tokens (3 turns dropped: the summary failed, 0s)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := New(&b, Options{}).Event(tt.ev); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%q\nwant:\n%q", b.String(), tt.want)
			}
		})
	}
}
