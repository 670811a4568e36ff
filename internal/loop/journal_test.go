package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// memJournal records appended events and the number durable at each Sync.
type memJournal struct {
	mu     sync.Mutex
	events []loop.Event
	syncs  []int
}

func (j *memJournal) Append(_ context.Context, ev loop.Event) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, ev)
	return nil
}

func (j *memJournal) Sync(context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.syncs = append(j.syncs, len(j.events))
	return nil
}

func (j *memJournal) snapshot() ([]loop.Event, []int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events), slices.Clone(j.syncs)
}

// counter is a tool that counts its executions per "id" argument.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) register(t *testing.T, reg *tool.Registry) {
	customTool(t, reg, "count", `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`,
		func(_ context.Context, inv *tool.Invocation) (tool.Result, error) {
			var a struct{ ID string }
			_ = json.Unmarshal(inv.Arguments, &a)
			c.mu.Lock()
			defer c.mu.Unlock()
			c.runs[a.ID]++
			return tool.Result{Output: "counted " + a.ID}, nil
		})
}

func restoreScript() *scripted.Script {
	return script(
		scripted.Turn{Text: "Counting a and b.", ToolCalls: []scripted.ToolCall{
			call("count", map[string]string{"id": "a"}), call("count", map[string]string{"id": "b"})}},
		tools(call("count", map[string]string{"id": "c"})),
		text("done"),
	)
}

func sequentialProfile(t *testing.T, c *counter) loop.Profile {
	p := profile.Anthropic("claude-sonnet-4-5")
	c.register(t, p.Registry())
	return withCaps(p, func(caps *loop.Capabilities) { caps.ParallelToolCalls = false; caps.Streaming = false })
}

// TestJournalSyncBoundaries: every event is appended in order, and the
// journal is synced right after each boundary event.
func TestJournalSyncBoundaries(t *testing.T) {
	env, _ := newEnv(t)
	j := &memJournal{}
	c := &counter{runs: map[string]int{}}
	s := newSession(t, sequentialProfile(t, c), env, restoreScript(), loop.WithJournal(j))
	s.Steer("steer")
	rec := record(s)
	if err := s.Submit(t.Context(), "count"); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	delivered := rec.All(t)
	journaled, syncs := j.snapshot()
	if len(journaled) != len(delivered) {
		t.Fatalf("journaled %d events, delivered %d", len(journaled), len(delivered))
	}
	for i := range journaled {
		if journaled[i].Seq != delivered[i].Seq || journaled[i].Kind != delivered[i].Kind {
			t.Fatalf("event %d differs: journal %s/%d, stream %s/%d", i, journaled[i].Kind, journaled[i].Seq,
				delivered[i].Kind, delivered[i].Seq)
		}
	}
	boundary := map[loop.EventKind]bool{loop.EventUserInput: true, loop.EventSteeringInjected: true,
		loop.EventAssistantTextEnd: true, loop.EventToolCallStart: true, loop.EventToolCallEnd: true, loop.EventSessionEnd: true}
	for i, ev := range journaled {
		if boundary[ev.Kind] && !slices.Contains(syncs, i+1) {
			t.Errorf("no Sync right after %s (seq %d); syncs %v", ev.Kind, ev.Seq, syncs)
		}
	}
}

// TestRestoreAtEveryBoundary cuts a journal after every event, restores,
// resumes, and checks each tool ran exactly once overall, or never again
// with the interrupted result when its start was journaled without its end.
func TestRestoreAtEveryBoundary(t *testing.T) {
	env, _ := newEnv(t)
	j := &memJournal{}
	c := &counter{runs: map[string]int{}}
	s := newSession(t, sequentialProfile(t, c), env, restoreScript(), loop.WithJournal(j), loop.WithID("sess"))
	rec := record(s)
	if err := s.Submit(t.Context(), "count"); err != nil {
		t.Fatal(err)
	}
	full, _ := j.snapshot()
	_ = s.Close()
	rec.All(t)
	callOf := map[string]string{"a": "call_1_1", "b": "call_1_2", "c": "call_2_1"}

	for cut := 2; cut <= len(full); cut++ {
		t.Run(fmt.Sprintf("cut_%d_after_%s", cut, full[cut-1].Kind), func(t *testing.T) {
			prefix := full[:cut]
			started, ended := map[string]bool{}, map[string]bool{}
			for _, ev := range prefix {
				switch ev.Kind {
				case loop.EventToolCallStart:
					started[ev.Data.CallID] = true
				case loop.EventToolCallEnd:
					ended[ev.Data.CallID] = true
				}
			}
			rc := &counter{runs: map[string]int{}}
			j2 := &memJournal{}
			env2, _ := newEnv(t)
			s2 := newSession(t, sequentialProfile(t, rc), env2, restoreScript(), loop.WithRestore(prefix), loop.WithJournal(j2))
			mustf(t, s2.ID() == "sess", "restored id %q", s2.ID())
			rec2 := record(s2)
			if s2.NeedsResume() {
				if err := s2.Submit(t.Context(), "x"); err == nil {
					t.Fatal("Submit before Resume succeeded")
				}
				if err := s2.Resume(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			mustf(t, s2.State() == loop.StateIdle, "state %s after resume", s2.State())
			for id, callID := range callOf {
				want := 1
				if started[callID] {
					want = 0
				}
				if rc.runs[id] != want {
					t.Errorf("tool %s ran %d times after restore, want %d", id, rc.runs[id], want)
				}
			}
			results := map[string]string{}
			for _, turn := range s2.History() {
				if r, ok := turn.(*loop.ToolResultsTurn); ok {
					for _, res := range r.Results {
						if _, dup := results[res.CallID]; dup {
							t.Errorf("two results for %s", res.CallID)
						}
						results[res.CallID] = res.Content
					}
				}
			}
			for id, callID := range callOf {
				want := "counted " + id
				if started[callID] && !ended[callID] {
					want = loop.InterruptedResult
				}
				if results[callID] != want {
					t.Errorf("result of %s = %q, want %q", callID, results[callID], want)
				}
			}
			_ = s2.Close()
			evs := rec2.All(t)
			if len(evs) > 0 && evs[0].Seq != uint64(cut+1) {
				t.Errorf("first new event has seq %d, want %d", evs[0].Seq, cut+1)
			}
			for i := 1; i < len(evs); i++ {
				if evs[i].Seq != evs[i-1].Seq+1 {
					t.Fatalf("seq gap after restore: %d then %d", evs[i-1].Seq, evs[i].Seq)
				}
			}
		})
	}
}

func TestRestoreRejectsGaps(t *testing.T) {
	env, _ := newEnv(t)
	evs := []loop.Event{
		{Kind: loop.EventSessionStart, SessionID: "s", Seq: 1},
		{Kind: loop.EventUserInput, SessionID: "s", Seq: 3},
	}
	if _, err := loop.New(anthropic(), env, scripted.New(script(), "m"), loop.WithRestore(evs)); err == nil {
		t.Error("restore accepted a journal with a gap")
	}
}

// failingJournal fails every Sync from the n-th on, as a journal whose
// store is gone when the session's ctx ends.
type failingJournal struct {
	memJournal
	n, calls int
}

func (j *failingJournal) Sync(ctx context.Context) error {
	j.calls++
	if j.calls >= j.n {
		return errors.New("store unreachable")
	}
	return j.memJournal.Sync(ctx)
}

// TestToolNotRunWithoutDurableStart: when the TOOL_CALL_START cannot be made
// durable the tool does not run, and the session closes with the error.
func TestToolNotRunWithoutDurableStart(t *testing.T) {
	env, _ := newEnv(t)
	c := &counter{runs: map[string]int{}}
	j := &failingJournal{n: 3} // USER_INPUT, ASSISTANT_TEXT_END, then TOOL_CALL_START fails
	s := newSession(t, sequentialProfile(t, c), env, restoreScript(), loop.WithJournal(j))
	rec := record(s)
	if err := s.Submit(t.Context(), "count"); err == nil {
		t.Fatal("Submit succeeded with a failing journal")
	}
	rec.All(t)
	if len(c.runs) != 0 {
		t.Errorf("tools ran without a durable start: %v", c.runs)
	}
	mustf(t, s.State() == loop.StateClosed, "state %s", s.State())
}
