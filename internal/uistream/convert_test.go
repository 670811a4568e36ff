package uistream

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// e is an event without seq; seqs are given by convert.
func e(kind loop.EventKind, d loop.EventData) loop.Event { return loop.Event{Kind: kind, Data: d} }

// convert feeds evs (seq 1, 2, ...) to a new Converter, then finishes.
func convert(evs []loop.Event) []Chunk {
	c := NewConverter("uid-1")
	var out []Chunk
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
		out = append(out, c.Event(ev)...)
	}
	return append(out, c.Finish()...)
}

// sum is a one-line summary of a chunk for comparisons.
func sum(c Chunk) string {
	switch c.Type {
	case TypeStart:
		return "start " + c.MessageID
	case TypeFinish:
		return "finish " + c.FinishReason
	case TypeTextDelta, TypeReasoningDelta:
		return fmt.Sprintf("%s %s %q", c.Type, c.ID, c.Delta)
	case TypeToolInputStart:
		return fmt.Sprintf("%s %s %s", c.Type, c.ToolCallID, c.ToolName)
	case TypeToolInputAvailable:
		return fmt.Sprintf("%s %s %s %s", c.Type, c.ToolCallID, c.ToolName, c.Input)
	case TypeToolOutputAvailable:
		return fmt.Sprintf("%s %s %s", c.Type, c.ToolCallID, c.Output)
	case TypeToolOutputError:
		return fmt.Sprintf("%s %s %s", c.Type, c.ToolCallID, c.ErrorText)
	case TypeSourceURL:
		return fmt.Sprintf("%s %s %s", c.Type, c.SourceID, c.URL)
	case TypeError:
		return "error " + c.ErrorText
	}
	if IsData(c.Type) {
		f := []string{c.Type}
		if c.ID != "" {
			f = append(f, c.ID)
		}
		if c.Transient {
			f = append(f, "transient")
		}
		return strings.Join(f, " ")
	}
	return strings.TrimSpace(c.Type + " " + c.ID)
}

func sums(cs []Chunk) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = sum(c)
	}
	return out
}

func TestConverterMapsEvents(t *testing.T) {
	tests := []struct {
		name string
		evs  []loop.Event
		want []string
	}{
		{"empty journal", nil, []string{"start uid-1", "finish stop"}},
		{"streamed text", []loop.Event{
			e(loop.EventSessionStart, loop.EventData{State: "IDLE"}),
			e(loop.EventUserInput, loop.EventData{Content: "hi"}),
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextDelta, loop.EventData{Delta: "Hel"}),
			e(loop.EventAssistantTextDelta, loop.EventData{Delta: "lo"}),
			e(loop.EventAssistantTextEnd, loop.EventData{Text: "Hello", Usage: &llm.Usage{InputTokens: 10, OutputTokens: 2}}),
			e(loop.EventSessionEnd, loop.EventData{State: "IDLE", Text: "Hello"}),
		}, []string{"start uid-1", "data-state state", "data-user-input input-2", "start-step",
			"text-start text-4", `text-delta text-4 "Hel"`, `text-delta text-4 "lo"`, "text-end text-4", "data-usage usage",
			"finish-step", "data-state state", "finish stop"}},
		{"text not streamed, reasoning, citation", []loop.Event{
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextEnd, loop.EventData{Text: "Done.", Reasoning: "think",
				Citations: []llm.Citation{{URL: "https://example.com/a", Title: "A"}, {URL: ""}}}),
		}, []string{"start uid-1", "start-step", "reasoning-start reasoning-2", `reasoning-delta reasoning-2 "think"`,
			"reasoning-end reasoning-2", "text-start text-2", `text-delta text-2 "Done."`, "text-end text-2",
			"source-url source-2-0 https://example.com/a", "data-usage usage", "finish-step", "finish stop"}},
		{"tool round then next step", []loop.Event{
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextEnd, loop.EventData{}),
			e(loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: "c1", Arguments: json.RawMessage(`{"command":"ls"}`)}),
			e(loop.EventToolCallOutputDelta, loop.EventData{CallID: "c1", Delta: "a\n"}),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "c1", Output: "a\n"}),
			e(loop.EventToolCallStart, loop.EventData{ToolName: "read_file", CallID: "c2", Arguments: json.RawMessage(`not json`)}),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "read_file", CallID: "c2", IsError: true, Output: "Error: no such file"}),
			e(loop.EventSteeringInjected, loop.EventData{Content: "stop"}),
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextDelta, loop.EventData{Delta: "ok"}),
		}, []string{"start uid-1", "start-step", "data-usage usage",
			"tool-input-start c1 shell", `tool-input-available c1 shell {"command":"ls"}`, "data-event transient",
			"data-tool-output transient", `tool-output-available c1 "a\n"`, "data-event transient",
			"tool-input-start c2 read_file", `tool-input-available c2 read_file "not json"`, "data-event transient",
			"tool-output-error c2 Error: no such file", "data-event transient",
			"data-steering steering-8", "finish-step", "start-step", "text-start text-10", `text-delta text-10 "ok"`,
			"text-end text-10", "finish-step", "finish stop"}},
		{"stream cut mid-answer", []loop.Event{
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextDelta, loop.EventData{Delta: "par"}),
			e(loop.EventWarning, loop.EventData{Message: loop.StreamRestartWarning}),
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextDelta, loop.EventData{Delta: "whole"}),
			e(loop.EventAssistantTextEnd, loop.EventData{Text: "whole"}),
		}, []string{"start uid-1", "start-step", "text-start text-2", `text-delta text-2 "par"`, "data-notice notice-3",
			"text-end text-2", "data-text-discarded discarded-4", "text-start text-5", `text-delta text-5 "whole"`,
			"text-end text-5", "data-usage usage", "finish-step", "finish stop"}},
		{"cut before any text keeps one step", []loop.Event{
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventWarning, loop.EventData{Message: loop.StreamRestartWarning}),
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextEnd, loop.EventData{Text: "x"}),
		}, []string{"start uid-1", "start-step", "data-notice notice-2", "text-start text-4", `text-delta text-4 "x"`,
			"text-end text-4", "data-usage usage", "finish-step", "finish stop"}},
		{"result without its call, output delta of unknown call", []loop.Event{
			e(loop.EventToolCallOutputDelta, loop.EventData{CallID: "c9", Delta: "x"}),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "c9", IsError: true}),
		}, []string{"start uid-1", "start-step", "tool-input-start c9 shell", "tool-input-available c9 shell {}",
			"tool-output-error c9 the tool failed", "data-event transient", "finish-step", "finish stop"}},
		{"errors and the closing error", []loop.Event{
			e(loop.EventAssistantTextStart, loop.EventData{}),
			e(loop.EventAssistantTextDelta, loop.EventData{Delta: "a"}),
			e(loop.EventError, loop.EventData{Message: "overloaded", ErrorKind: "server"}),
			e(loop.EventSessionEnd, loop.EventData{State: "CLOSED", Error: "model unavailable"}),
		}, []string{"start uid-1", "start-step", "text-start text-2", `text-delta text-2 "a"`, "error [server] overloaded",
			"text-end text-2", "finish-step", "data-state state", "error model unavailable", "finish error"}},
		{"operator facts", []loop.Event{
			e(loop.EventPlanUpdated, loop.EventData{Plan: []loop.PlanItem{{Content: "a", Status: "pending"}}}),
			e(loop.EventTurnLimit, loop.EventData{Round: 3}),
			e(loop.EventLoopDetection, loop.EventData{Message: "same call"}),
			e(loop.EventContextCompacted, loop.EventData{Compaction: &loop.Compaction{TokensBefore: 9, TokensAfter: 1}}),
			e(loop.EventChangesRecorded, loop.EventData{Message: "1 file changed", Changes: json.RawMessage(`{"filesChanged":1}`)}),
			e("SOMETHING_NEW", loop.EventData{Message: "ignored"}),
		}, []string{"start uid-1", "data-plan plan", "data-notice notice-2", "data-notice notice-3",
			"data-compaction compaction-4", "data-changes changes", "finish stop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := convert(tt.evs)
			if !slices.Equal(sums(got), tt.want) {
				t.Errorf("chunks:\n%s\nwant:\n%s", strings.Join(sums(got), "\n"), strings.Join(tt.want, "\n"))
			}
			if _, err := read(got); err != nil {
				t.Errorf("the reader refuses the stream: %v", err)
			}
		})
	}
}

// The data parts carry the facts a console shows: the subagent tree from
// spawn_agent, wait and close_agent results, running token totals, the
// whole plan, the change.
func TestConverterDataPayloads(t *testing.T) {
	spawn := func(id, agent string) []loop.Event {
		return []loop.Event{
			e(loop.EventToolCallStart, loop.EventData{ToolName: "spawn_agent", CallID: id, Arguments: json.RawMessage(`{"task":"t"}`)}),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "spawn_agent", CallID: id, Output: `{"agent_id":"` + agent + `","status":"running"}`}),
		}
	}
	tests := []struct {
		name string
		evs  []loop.Event
		key  string // type/id of the data part
		want string // its data, without seq and time
	}{
		{"spawned", spawn("s1", "lead-sub-1"), DataSubagent + "/subagent-lead-sub-1",
			`{"name":"lead-sub-1","state":"running","toolCallId":"s1"}`},
		{"finished", append(spawn("s1", "lead-sub-1"),
			e(loop.EventToolCallStart, loop.EventData{ToolName: "wait", CallID: "w1", Arguments: json.RawMessage(`{"agent_id":"lead-sub-1"}`)}),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "wait", CallID: "w1", Output: `{"agent_id":"lead-sub-1","output":"done","success":true,"turns_used":4}`})),
			DataSubagent + "/subagent-lead-sub-1", `{"name":"lead-sub-1","state":"succeeded","turnsUsed":4,"toolCallId":"w1"}`},
		{"failed", append(spawn("s1", "x"),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "wait", CallID: "w1", Output: `{"agent_id":"x","output":"","success":false,"turns_used":1}`})),
			DataSubagent + "/subagent-x", `{"name":"x","state":"failed","turnsUsed":1,"toolCallId":"w1"}`},
		{"closed", append(spawn("s1", "x"),
			e(loop.EventToolCallStart, loop.EventData{ToolName: "close_agent", CallID: "k1", Arguments: json.RawMessage(`{"agent_id":"x"}`)}),
			e(loop.EventToolCallEnd, loop.EventData{ToolName: "close_agent", CallID: "k1", Output: "Agent x closed."})),
			DataSubagent + "/subagent-x", `{"name":"x","state":"closed","toolCallId":"k1"}`},
		{"usage adds up", []loop.Event{
			e(loop.EventAssistantTextEnd, loop.EventData{Usage: &llm.Usage{InputTokens: 10, OutputTokens: 2, CacheReadTokens: 4}}),
			e(loop.EventAssistantTextEnd, loop.EventData{Usage: &llm.Usage{InputTokens: 20, OutputTokens: 3, ReasoningTokens: 1},
				Context: &loop.ContextUsage{Window: 200000, RequestTokens: 20}}),
		}, DataUsage + "/usage", `{"inputTokens":30,"outputTokens":5,"reasoningTokens":1,"cacheReadTokens":4,"totalTokens":35,"turns":2,"contextWindow":200000,"requestTokens":20}`},
		{"plan is replaced", []loop.Event{
			e(loop.EventPlanUpdated, loop.EventData{Plan: []loop.PlanItem{{Content: "a", Status: "pending"}}}),
			e(loop.EventPlanUpdated, loop.EventData{Plan: []loop.PlanItem{{Content: "a", Status: "completed"}, {Content: "b", Status: "in_progress"}}}),
		}, DataPlan + "/plan", `{"items":[{"content":"a","status":"completed"},{"content":"b","status":"in_progress"}]}`},
		{"changes", []loop.Event{
			e(loop.EventChangesRecorded, loop.EventData{Message: "1 file changed", Changes: json.RawMessage(`{"filesChanged":1}`)}),
		}, DataChanges + "/changes", `{"message":"1 file changed","summary":{"filesChanged":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := read(convert(tt.evs))
			if err != nil {
				t.Fatal(err)
			}
			raw, ok := m.data[tt.key]
			if !ok {
				t.Fatalf("no data part %s in %v", tt.key, m.data)
			}
			var got map[string]any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			delete(got, "seq")
			delete(got, "time")
			b, _ := json.Marshal(got)
			var want map[string]any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			w, _ := json.Marshal(want)
			if string(b) != string(w) {
				t.Errorf("data %s\nwant %s", b, w)
			}
		})
	}
}

// A failed spawn_agent or an unparsable result is no subagent fact.
func TestNoSubagentFactFromFailures(t *testing.T) {
	for _, d := range []loop.EventData{
		{ToolName: "spawn_agent", CallID: "s", IsError: true, Output: `{"agent_id":"x"}`},
		{ToolName: "spawn_agent", CallID: "s", Output: "not json"},
		{ToolName: "wait", CallID: "s", Output: `{"agent_id":"x"}`},
		{ToolName: "close_agent", CallID: "s"},
	} {
		if sub, ok := subagentFact(loop.Event{Kind: loop.EventToolCallEnd, Data: d}, json.RawMessage(`{}`)); ok {
			t.Errorf("%+v: got fact %+v", d, sub)
		}
	}
}

func TestChunkJSON(t *testing.T) {
	tests := []struct {
		c    Chunk
		want string
	}{
		{Chunk{Type: TypeStart}, `{"type":"start"}`},
		{Chunk{Type: TypeTextDelta, ID: "t", Delta: ""}, `{"type":"text-delta","id":"t","delta":""}`},
		{Chunk{Type: TypeToolInputAvailable, ToolCallID: "c", ToolName: "n", Dynamic: true}, `{"type":"tool-input-available","toolCallId":"c","toolName":"n","input":null,"dynamic":true}`},
		{Chunk{Type: TypeToolOutputAvailable, ToolCallID: "c", Output: json.RawMessage(`""`)}, `{"type":"tool-output-available","toolCallId":"c","output":""}`},
		{Chunk{Type: "data-x", Data: json.RawMessage(`{"a":1}`), Transient: true}, `{"type":"data-x","data":{"a":1},"transient":true}`},
		{Chunk{Type: TypeFinish, FinishReason: "stop"}, `{"type":"finish","finishReason":"stop"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.c)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("got %s, want %s", b, tt.want)
		}
		if err := checkSchema(tt.c); err != nil {
			t.Error(err)
		}
	}
	if _, err := json.Marshal(Chunk{Type: "bogus"}); err == nil {
		t.Error("a chunk of an unknown type marshalled")
	}
}

// Finish ends everything once; events after it are ignored.
func TestFinishIsFinal(t *testing.T) {
	c := NewConverter("")
	c.Event(loop.Event{Kind: loop.EventAssistantTextStart, Seq: 1})
	c.Event(loop.Event{Kind: loop.EventAssistantTextDelta, Seq: 2, Data: loop.EventData{Delta: "x"}})
	got := sums(c.Finish())
	want := []string{"text-end text-2", "finish-step", "finish stop"}
	if !slices.Equal(got, want) {
		t.Errorf("Finish = %q, want %q", got, want)
	}
	if more := c.Event(loop.Event{Kind: loop.EventAssistantTextDelta, Seq: 3, Data: loop.EventData{Delta: "y"}}); more != nil {
		t.Errorf("after Finish: %q", sums(more))
	}
	if more := c.Finish(); more != nil {
		t.Errorf("second Finish: %q", sums(more))
	}
}
