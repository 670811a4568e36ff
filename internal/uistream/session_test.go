package uistream

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	llmprovider "github.com/agent-operator/agent-operator/internal/llm/provider"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// recordSession runs a real loop session of two inputs over the Anthropic
// adapter against the Anthropic wire-protocol test server and returns its
// events: reasoning, streamed text, a stream cut mid-answer and retried,
// plan updates, tool calls with output deltas, a failing tool call, a
// follow-up input, and the close.
func recordSession(t *testing.T) []loop.Event {
	t.Helper()
	todo := func(status ...string) scripted.ToolCall {
		items := []map[string]string{}
		for i, s := range status {
			items = append(items, map[string]string{"content": "step " + string(rune('a'+i)), "status": s})
		}
		return looptest.Call(loop.TodoToolName, map[string]any{"todos": items})
	}
	// Rounds of text plus a tool call in one response make the session long.
	var rounds []scripted.Turn
	for i := range 12 {
		rounds = append(rounds, scripted.Turn{Text: fmt.Sprintf("Round %d: listing.", i),
			ToolCalls: []scripted.ToolCall{looptest.Call("shell", map[string]string{"command": fmt.Sprintf("echo round %d; ls", i)})}})
	}
	sc := looptest.Script(slices.Concat([]scripted.Turn{
		scripted.Turn{Reasoning: "The file does not exist yet; write it.",
			ToolCalls: []scripted.ToolCall{todo("in_progress", "pending"),
				looptest.Call("write_file", map[string]string{"file_path": "hello.py", "content": "print('Hello')\n"})}},
		scripted.Turn{Text: "Created hello.py, which prints Hello.",
			Error: &scripted.Error{Kind: llm.KindServer, Message: "connection reset", MidStream: true, Times: 1}},
		scripted.Turn{ToolCalls: []scripted.ToolCall{
			looptest.Call("shell", map[string]string{"command": "for i in 1 2 3; do echo line $i; done; cat hello.py"}),
			looptest.Call("read_file", map[string]string{"file_path": "missing.txt"})}},
	}, rounds, []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{todo("completed", "completed")}},
		{Text: "It prints Hello; missing.txt does not exist. Anything else?"},
	})...)
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	p := profile.Anthropic("claude-sonnet-4-5")
	srv := llmtest.StartScript(t, llmtest.Anthropic, sc)
	c, err := llmprovider.New(llmprovider.Config{Provider: p.ID(), Model: p.Model(), BaseURL: srv.BaseURL(), APIKey: "test-key",
		Retry: llm.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := looptest.NewEnv(t)
	s, err := loop.New(p, env, c)
	if err != nil {
		t.Fatal(err)
	}
	rec := looptest.Record(s)
	for _, in := range []string{"create hello.py", "run it and read missing.txt"} {
		if err := s.Submit(t.Context(), in); err != nil {
			t.Fatalf("Submit %q: %v", in, err)
		}
	}
	_ = s.Close()
	evs := rec.All(t)
	for i := range evs {
		evs[i].Time = evs[i].Time.UTC().Round(0) // as read back from the journal
	}
	return evs
}

// The chunks of a whole recorded session satisfy every ordering rule of
// the AI SDK reader, and the message it rebuilds holds the session: the
// answers once each (the cut attempt marked discarded), every tool call
// with its input and its output or error, the last plan, the token totals.
func TestRecordedSessionKeepsTheReaderOrder(t *testing.T) {
	evs := recordSession(t)
	chunks := convert(evs)
	m, err := read(chunks)
	if err != nil {
		t.Fatalf("the reader refuses the stream: %v", err)
	}
	var answers []string
	var usage llm.Usage
	var plan []loop.PlanItem
	kinds := map[loop.EventKind]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
		switch ev.Kind {
		case loop.EventAssistantTextEnd:
			if ev.Data.Text != "" {
				answers = append(answers, ev.Data.Text)
			}
			if ev.Data.Usage != nil {
				usage = usage.Add(*ev.Data.Usage)
			}
		case loop.EventPlanUpdated:
			plan = ev.Data.Plan
		case loop.EventToolCallEnd:
			p, ok := m.tools[ev.Data.CallID]
			if !ok {
				t.Errorf("no tool part for call %s", ev.Data.CallID)
				continue
			}
			switch {
			case ev.Data.IsError && p.state != "output-error":
				t.Errorf("call %s (%s): state %s, want output-error", ev.Data.CallID, ev.Data.ToolName, p.state)
			case !ev.Data.IsError && (p.state != "output-available" || string(p.output) != string(mustJSON(ev.Data.Output))):
				t.Errorf("call %s (%s): state %s output %s, want output-available %q", ev.Data.CallID, ev.Data.ToolName, p.state, p.output, ev.Data.Output)
			}
			if p.name != ev.Data.ToolName {
				t.Errorf("call %s: tool name %q, want %q", ev.Data.CallID, p.name, ev.Data.ToolName)
			}
		case loop.EventToolCallStart:
			if p := m.tools[ev.Data.CallID]; p == nil || !json.Valid(p.input) || string(p.input) != string(ev.Data.Arguments) {
				t.Errorf("call %s: input %v, want %s", ev.Data.CallID, p, ev.Data.Arguments)
			}
		}
	}
	// The fixture must exercise what this test is about.
	for _, k := range []loop.EventKind{loop.EventAssistantTextDelta, loop.EventToolCallOutputDelta, loop.EventPlanUpdated,
		loop.EventWarning, loop.EventUserInput, loop.EventToolCallEnd} {
		if kinds[k] == 0 {
			t.Fatalf("the recorded session has no %s event: %v", k, kinds)
		}
	}
	if len(m.reasoning) == 0 || m.reasoning[0] != "The file does not exist yet; write it." {
		t.Errorf("reasoning parts %q", m.reasoning)
	}
	if got, want := m.text(), strings.Join(answers, "|"); got != want {
		t.Errorf("rebuilt text %q, want %q", got, want)
	}
	if len(m.tools) != kinds[loop.EventToolCallStart] {
		t.Errorf("%d tool parts, want %d", len(m.tools), kinds[loop.EventToolCallStart])
	}
	var pd planData
	if err := json.Unmarshal(m.data[DataPlan+"/plan"], &pd); err != nil || !slices.Equal(pd.Items, plan) {
		t.Errorf("plan part %+v (%v), want %+v", pd.Items, err, plan)
	}
	var ud usageData
	if err := json.Unmarshal(m.data[DataUsage+"/usage"], &ud); err != nil || ud.InputTokens != usage.InputTokens ||
		ud.OutputTokens != usage.OutputTokens || ud.Turns != kinds[loop.EventAssistantTextEnd] {
		t.Errorf("usage part %+v (%v), want %+v over %d turns", ud, err, usage, kinds[loop.EventAssistantTextEnd])
	}
	if m.finished != "stop" {
		t.Errorf("finish reason %q", m.finished)
	}
}

// What a live reader got for a prefix of the journal is a prefix of what
// a late joiner replaying the whole journal gets: chunks already sent never
// change, and converting the same journal twice gives the same bytes.
func TestChunksOfAPrefixArePrefixOfTheWhole(t *testing.T) {
	evs := recordSession(t)
	whole := marshalAll(t, convert(evs))
	if again := marshalAll(t, convert(evs)); !slices.Equal(again, whole) {
		t.Fatal("two conversions of the same journal differ")
	}
	c := NewConverter("uid-1")
	var live []Chunk
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
		live = append(live, c.Event(ev)...)
		got := marshalAll(t, live)
		if len(got) > len(whole) || !slices.Equal(got, whole[:len(got)]) {
			t.Fatalf("after event %d (%s) the live chunks are no prefix of the whole stream", i+1, ev.Kind)
		}
	}
}

func marshalAll(t *testing.T, cs []Chunk) []string {
	t.Helper()
	out := make([]string, len(cs))
	for i, c := range cs {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}
