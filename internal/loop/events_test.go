package loop_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// TestAllEventKinds drives one session through every EventKind.
func TestAllEventKinds(t *testing.T) {
	env, _ := newEnv(t)
	p := withCaps(anthropic(), func(c *loop.Capabilities) { c.ContextWindow = 10 })
	cfg := loop.DefaultConfig()
	cfg.MaxToolRoundsPerInput = 2
	cfg.LoopDetectionWindow = 2
	cfg.Compaction.Disabled = true // the 10-token window is there for the usage WARNING
	echo := call("shell", map[string]any{"command": "echo hi"})
	s := newSession(t, p, env, script(
		scripted.Turn{Text: "Let me look around first.", ToolCalls: []scripted.ToolCall{echo}},
		tools(echo),
		scripted.Turn{Error: &scripted.Error{Kind: llm.KindAuthentication, StatusCode: 401, Message: "bad key"}},
	), loop.WithConfig(cfg))
	rec := record(s)
	s.Steer("be brief")
	if err := s.Submit(t.Context(), "explore"); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(t.Context(), "continue"); llm.KindOf(err) != llm.KindAuthentication {
		t.Fatalf("Submit = %v, want the authentication error", err)
	}
	evs := rec.All(t)
	checkSeq(t, evs)
	seen := map[loop.EventKind]bool{}
	for _, e := range evs {
		seen[e.Kind] = true
	}
	for _, k := range []loop.EventKind{loop.EventSessionStart, loop.EventSessionEnd, loop.EventUserInput,
		loop.EventAssistantTextStart, loop.EventAssistantTextDelta, loop.EventAssistantTextEnd,
		loop.EventToolCallStart, loop.EventToolCallOutputDelta, loop.EventToolCallEnd, loop.EventSteeringInjected,
		loop.EventTurnLimit, loop.EventLoopDetection, loop.EventError, loop.EventWarning} {
		if !seen[k] {
			t.Errorf("no %s event", k)
		}
	}
	if evs[0].Kind != loop.EventSessionStart || evs[len(evs)-1].Kind != loop.EventSessionEnd {
		t.Errorf("session not bracketed: first %s, last %s", evs[0].Kind, evs[len(evs)-1].Kind)
	}
	start := ofKind(evs, loop.EventToolCallStart)[0]
	if start.Data.ToolName != "shell" || start.Data.CallID == "" || len(start.Data.Arguments) == 0 {
		t.Errorf("TOOL_CALL_START data %+v", start.Data)
	}
	end := ofKind(evs, loop.EventAssistantTextEnd)[0]
	if end.Data.Assistant == nil || len(end.Data.Assistant.ToolCalls()) != 1 || end.Data.Text != "Let me look around first." {
		t.Errorf("ASSISTANT_TEXT_END data %+v", end.Data)
	}
}

// TestEventBufferCoalescesDeltas: a consumer that stops reading does not
// stall a chatty tool; its deltas are coalesced without loss.
func TestEventBufferCoalescesDeltas(t *testing.T) {
	env, _ := newEnv(t)
	p := profile.Anthropic("claude-sonnet-4-5")
	emitted := make(chan struct{})
	var want strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&want, "chunk-%d\n", i)
	}
	customTool(t, p.Registry(), "chatty", "", func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
		for i := range 1000 {
			inv.Output(fmt.Sprintf("chunk-%d\n", i))
		}
		close(emitted) // all 1000 deltas were accepted while nobody read
		return tool.Result{Output: want.String()}, nil
	})
	s := newSession(t, p, env, script(tools(call("chatty", map[string]any{})), text("done")), loop.WithEventBuffer(2))
	errc := make(chan error, 1)
	go func() { errc <- s.Submit(t.Context(), "talk") }()
	var evs []loop.Event
	ch := s.Events()
	for ev := range ch {
		evs = append(evs, ev)
		if ev.Kind == loop.EventToolCallStart {
			<-emitted // stop reading until the tool has emitted everything
		}
		if ev.Kind == loop.EventSessionEnd && len(evs) > 5 {
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	for ev := range ch {
		evs = append(evs, ev)
	}
	checkSeq(t, evs)
	var got strings.Builder
	n := 0
	for _, e := range ofKind(evs, loop.EventToolCallOutputDelta) {
		got.WriteString(e.Data.Delta)
		n++
	}
	if got.String() != want.String() {
		t.Fatalf("coalesced deltas lost data: %d of %d bytes", got.Len(), want.Len())
	}
	if n >= 1000 {
		t.Errorf("%d delta events: nothing was coalesced", n)
	}
	idx := slices.IndexFunc(evs, func(e loop.Event) bool { return e.Kind == loop.EventToolCallEnd })
	for _, e := range evs[idx:] {
		if e.Kind == loop.EventToolCallOutputDelta {
			t.Error("a delta was delivered after TOOL_CALL_END")
		}
	}
}

// TestEventBufferAbortWithoutConsumer: nobody reads and the buffer holds one
// event; cancelling Submit or calling Close still completes and every event
// is delivered afterwards.
func TestEventBufferAbortWithoutConsumer(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			env, _ := newEnv(t)
			s := newSession(t, anthropic(), env, script(text("hello")), loop.WithEventBuffer(1))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- s.Submit(ctx, "hi") }()
			if how == "cancel" {
				cancel()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			err := <-errc
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, loop.ErrClosed) {
				t.Fatalf("Submit = %v", err)
			}
			_ = s.Close()
			var evs []loop.Event
			for ev := range s.Events() {
				evs = append(evs, ev)
			}
			checkSeq(t, evs)
			if evs[0].Kind != loop.EventSessionStart {
				t.Errorf("first event %s", evs[0].Kind)
			}
			last := evs[len(evs)-1]
			if last.Kind != loop.EventSessionEnd || last.Data.State != "CLOSED" {
				t.Errorf("last event %s %q", last.Kind, last.Data.State)
			}
		})
	}
}

// stallJournal records events until down is set; from then on Append and
// Sync wait for their context, as a journal whose store is unreachable does,
// and stalled is closed.
type stallJournal struct {
	down    atomic.Bool
	once    sync.Once
	stalled chan struct{}
}

func (j *stallJournal) Append(ctx context.Context, _ loop.Event) error {
	if j.down.Load() {
		j.once.Do(func() { close(j.stalled) })
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (j *stallJournal) Sync(ctx context.Context) error { return j.Append(ctx, loop.Event{}) }

// TestCloseWhileJournalStalled: held-back deltas are journaled by the
// deliverer while it holds the emitter's lock; when the journal's store is
// unreachable, Close must still abort the session instead of waiting for the
// store to come back.
func TestCloseWhileJournalStalled(t *testing.T) {
	env, _ := newEnv(t)
	p := profile.Anthropic("claude-sonnet-4-5")
	j := &stallJournal{stalled: make(chan struct{})}
	emitted := make(chan struct{})
	customTool(t, p.Registry(), "chatty", "", func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
		for i := range 100 {
			inv.Output(fmt.Sprintf("chunk-%d\n", i))
		}
		j.down.Store(true) // the store goes away with deltas still held back
		close(emitted)
		return tool.Result{Output: "ok"}, nil
	})
	s := newSession(t, p, env, script(tools(call("chatty", map[string]any{})), text("done")),
		loop.WithEventBuffer(2), loop.WithJournal(j))
	go func() { _ = s.Submit(t.Context(), "talk") }()
	// The reader stops at TOOL_CALL_START so that the tool's deltas are held
	// back, and resumes once they are. Which of the deliverer and the loop
	// journals the held deltas depends on scheduling (the deliverer may even
	// stall before TOOL_CALL_START is delivered), so the test waits only for
	// the tool's own signal and for the stall, never for a particular event.
	resume := make(chan struct{})
	go func() {
		ch := s.Events()
		for ev := range ch {
			if ev.Kind == loop.EventToolCallStart {
				break
			}
		}
		<-resume
		for range ch { // reading lets the deliverer journal the held deltas
		}
	}()
	<-emitted
	close(resume)
	select { // an Append now waits for the unreachable store while holding the emitter
	case <-j.stalled:
	case <-time.After(time.Minute):
		t.Fatal("no journal Append after the store went away")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return while the journal was unreachable")
	}
	if s.State() != loop.StateClosed {
		t.Fatalf("state %s after Close", s.State())
	}
}
