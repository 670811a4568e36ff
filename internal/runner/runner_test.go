package runner

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

func ev(seq uint64, kind loop.EventKind, d loop.EventData) loop.Event {
	return loop.Event{Seq: seq, Kind: kind, Data: d, Time: time.Unix(int64(seq), 0)}
}

func TestApplyEvent(t *testing.T) {
	usage := &llm.Usage{InputTokens: 10, OutputTokens: 5}
	cases := []struct {
		name   string
		events []loop.Event
		want   Progress
	}{
		{"natural completion", []loop.Event{
			ev(1, loop.EventSessionStart, loop.EventData{}),
			ev(2, loop.EventUserInput, loop.EventData{Content: "task"}),
			ev(3, loop.EventAssistantTextEnd, loop.EventData{Text: "calling", Usage: usage}),
			ev(4, loop.EventToolCallEnd, loop.EventData{CallID: "c1"}),
			ev(5, loop.EventAssistantTextEnd, loop.EventData{Text: "Done.", Usage: usage}),
			ev(6, loop.EventSessionEnd, loop.EventData{State: "IDLE", Text: "Done."}),
		}, Progress{Phase: agentsv1.PhaseSucceeded, Reason: agentsv1.ReasonSucceeded, Turns: 2, ToolCalls: 1,
			Usage: llm.Usage{InputTokens: 20, OutputTokens: 10}, Result: "Done.", LastSeq: 6, StartTime: time.Unix(1, 0),
			IdleSince: time.Unix(6, 0)}},
		{"question awaits input", []loop.Event{
			ev(1, loop.EventUserInput, loop.EventData{Content: "task"}),
			ev(2, loop.EventAssistantTextEnd, loop.EventData{Text: "Which file?"}),
			ev(3, loop.EventSessionEnd, loop.EventData{State: "AWAITING_INPUT", Text: "Which file?"}),
		}, Progress{Phase: agentsv1.PhaseAwaitingInput, Reason: agentsv1.ReasonAwaitingInput, Turns: 1,
			Result: "Which file?", LastSeq: 3, StartTime: time.Unix(1, 0), IdleSince: time.Unix(3, 0)}},
		{"turn limit fails", []loop.Event{
			ev(1, loop.EventUserInput, loop.EventData{Content: "task"}),
			ev(2, loop.EventTurnLimit, loop.EventData{TotalTurns: 3}),
			ev(3, loop.EventSessionEnd, loop.EventData{State: "IDLE"}),
		}, Progress{Phase: agentsv1.PhaseFailed, Reason: agentsv1.ReasonTurnLimit, Error: "spec.limits.maxTurns reached",
			LastSeq: 3, StartTime: time.Unix(1, 0)}},
		{"closed by an error", []loop.Event{
			ev(1, loop.EventUserInput, loop.EventData{Content: "task"}),
			ev(2, loop.EventSessionEnd, loop.EventData{State: "CLOSED", Error: "auth failed"}),
		}, Progress{Phase: agentsv1.PhaseFailed, Reason: agentsv1.ReasonFailed, Error: "auth failed", LastSeq: 2, StartTime: time.Unix(1, 0)}},
		{"follow-up reopens", []loop.Event{
			ev(1, loop.EventSessionEnd, loop.EventData{State: "IDLE", Text: "Done."}),
			ev(2, loop.EventUserInput, loop.EventData{Content: "more", FollowUp: true}),
		}, Progress{Phase: agentsv1.PhaseRunning, Reason: agentsv1.ReasonRunning, Result: "Done.", LastSeq: 2, StartTime: time.Unix(1, 0)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Progress
			for _, e := range tc.events {
				applyEvent(&p, e)
			}
			if p.Phase != tc.want.Phase || p.Reason != tc.want.Reason || p.Error != tc.want.Error || p.Turns != tc.want.Turns ||
				p.ToolCalls != tc.want.ToolCalls || p.Usage != tc.want.Usage || p.Result != tc.want.Result ||
				p.LastSeq != tc.want.LastSeq || !p.StartTime.Equal(tc.want.StartTime) || !p.IdleSince.Equal(tc.want.IdleSince) {
				t.Errorf("progress = %+v\nwant       %+v", p, tc.want)
			}
		})
	}
}

func TestAbortedPhaseIsNotOverwrittenByClose(t *testing.T) {
	p := Progress{Phase: agentsv1.PhaseAborted, Reason: agentsv1.ReasonAborted}
	applyEvent(&p, ev(1, loop.EventSessionEnd, loop.EventData{State: "CLOSED", Error: "session aborted"}))
	if p.Phase != agentsv1.PhaseAborted {
		t.Errorf("phase = %s, want Aborted", p.Phase)
	}
}

func TestTruncateResult(t *testing.T) {
	cases := []struct {
		in        string
		limit     int
		want      string
		truncated bool
	}{
		{"short", 10, "short", false},
		{"exactly10!", 10, "exactly10!", false},
		{"abcdefghijk", 10, "abcdefghij", true},
		{"aaaaaaaaé", 9, "aaaaaaaa", true}, // é is 2 bytes: never cut inside a rune
	}
	for _, tc := range cases {
		got, tr := truncateResult(tc.in, tc.limit)
		if got != tc.want || tr != tc.truncated {
			t.Errorf("truncateResult(%q, %d) = %q, %v; want %q, %v", tc.in, tc.limit, got, tr, tc.want, tc.truncated)
		}
	}
	long := strings.Repeat("x", agentsv1.MaxResultBytes+1)
	var p Progress
	p.setResult(long)
	if len(p.Result) != agentsv1.MaxResultBytes || !p.ResultTruncated {
		t.Errorf("result of %d bytes, truncated %v", len(p.Result), p.ResultTruncated)
	}
}

func TestDeliveredInJournal(t *testing.T) {
	msgs := []agentsv1.Message{
		{Name: "a", Kind: agentsv1.MessageFollowUp, Text: "first"},
		{Name: "b", Kind: agentsv1.MessageSteer, Text: "second"},
		{Name: "c", Kind: agentsv1.MessageFollowUp, Text: "third"},
	}
	prompt := ev(1, loop.EventUserInput, loop.EventData{Content: "first"}) // the prompt happens to equal a message
	cases := []struct {
		name   string
		events []loop.Event
		want   []string
	}{
		{"nothing journaled", []loop.Event{prompt}, nil},
		{"follow-up and steering journaled", []loop.Event{prompt,
			ev(2, loop.EventUserInput, loop.EventData{Content: "first"}),
			ev(3, loop.EventSteeringInjected, loop.EventData{Content: "second"})}, []string{"a", "b"}},
		{"all three, in order", []loop.Event{prompt,
			ev(2, loop.EventUserInput, loop.EventData{Content: "first"}),
			ev(3, loop.EventSteeringInjected, loop.EventData{Content: "second"}),
			ev(4, loop.EventUserInput, loop.EventData{Content: "third"})}, []string{"a", "b", "c"}},
		{"order is kept: a later text does not mark an earlier message", []loop.Event{prompt,
			ev(2, loop.EventUserInput, loop.EventData{Content: "second"})}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := deliveredInJournal(msgs, tc.events)
			if !slices.Equal(got, tc.want) {
				t.Errorf("deliveredInJournal = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLoopConfig(t *testing.T) {
	spec := &agentsv1.AgentSessionSpec{
		Model:        agentsv1.ModelSpec{Provider: agentsv1.ProviderOpenAI, Name: "gpt-5", ReasoningEffort: agentsv1.ReasoningHigh},
		Instructions: "Use tabs.",
		Limits: agentsv1.Limits{MaxTurns: 40, MaxToolRoundsPerInput: 8,
			DefaultCommandTimeout: &metav1.Duration{Duration: 30 * time.Second}, MaxCommandTimeout: &metav1.Duration{Duration: time.Hour}},
		Tools: agentsv1.ToolsSpec{OutputLimits: map[string]int32{"shell": 5000}, DisabledTools: []string{"apply_patch"}},
	}
	cfg := loopConfig(spec)
	if cfg.MaxTurns != 40 || cfg.MaxToolRoundsPerInput != 8 || cfg.DefaultCommandTimeout != 30*time.Second ||
		cfg.MaxCommandTimeout != time.Hour || cfg.ReasoningEffort != "high" || cfg.ToolOutputLimits["shell"] != 5000 ||
		cfg.UserInstructions != "Use tabs." || cfg.MaxSubagentDepth != 1 {
		t.Errorf("config = %+v", cfg)
	}
	p, err := buildProfile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID() != "openai" || slices.Contains(p.Registry().Names(), "apply_patch") {
		t.Errorf("profile %s has tools %v", p.ID(), p.Registry().Names())
	}
	if got := profileName(&agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted}}); got != "anthropic" {
		t.Errorf("scripted profile = %s", got)
	}
}
