package loop

import (
	"context"
	"fmt"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// pendingRound is a tool round that a restored journal left unfinished.
type pendingRound struct {
	calls   []llm.ToolCall
	results map[string]llm.ToolResult
	started map[string]bool
}

// restore rebuilds history, state, counters and the next Seq from the
// journaled events of this session (WithRestore). It returns the last Seq.
//
// Rules: USER_INPUT, STEERING_INJECTED and LOOP_DETECTION become user and
// steering turns; ASSISTANT_TEXT_END rebuilds the assistant turn from its
// full message; TOOL_CALL_END becomes that call's result (truncated again
// with this session's limits, as the model saw it); a round whose calls all
// ended becomes a ToolResultsTurn. SESSION_END sets the state; a journal
// that ends anywhere else leaves the session mid-processing, to be
// continued with Resume.
func (s *Session) restore(events []Event) (uint64, error) {
	var (
		seq     uint64
		pending *pendingRound
		state   = StateIdle
	)
	for _, ev := range events {
		if ev.Seq != seq+1 {
			return 0, fmt.Errorf("restore: event %s has seq %d, want %d", ev.Kind, ev.Seq, seq+1)
		}
		if ev.SessionID != s.id {
			return 0, fmt.Errorf("restore: event %d belongs to session %q, not %q", ev.Seq, ev.SessionID, s.id)
		}
		seq = ev.Seq
		d := ev.Data
		switch ev.Kind {
		case EventSessionStart:
			s.started = true
		case EventUserInput:
			s.appendRestored(&UserTurn{Content: d.Content, Timestamp: ev.Time})
			state = StateProcessing
			s.resumeRound = 0
		case EventSteeringInjected:
			s.appendRestored(&SteeringTurn{Content: d.Content, Timestamp: ev.Time})
		case EventLoopDetection:
			s.appendRestored(&SteeringTurn{Content: d.Message, Timestamp: ev.Time})
		case EventAssistantTextEnd:
			s.loadFoundLocked() // as callModel did before this response's request
			turn := restoredAssistant(ev)
			s.appendRestored(turn)
			s.turns++
			s.lastText = turn.Content
			pending = nil
			if len(turn.ToolCalls) > 0 {
				pending = &pendingRound{calls: turn.ToolCalls, results: map[string]llm.ToolResult{}, started: map[string]bool{}}
			}
		case EventToolCallStart:
			if pending != nil {
				pending.started[d.CallID] = true
			}
		case EventToolCallEnd:
			s.restoreFileViews(d)
			s.restoreToolSearch(d)
			if pending == nil {
				continue
			}
			pending.results[d.CallID] = s.restoredResult(d)
			if len(pending.results) == len(pending.calls) {
				s.appendRestored(&ToolResultsTurn{Results: pending.ordered(), Timestamp: ev.Time})
				s.resumeRound++
				pending = nil
			}
		case EventContextCompacted:
			if err := s.restoreCompaction(ev); err != nil {
				return 0, err
			}
		case EventPlanUpdated:
			s.plan = d.Plan
		case EventSessionEnd:
			state = State(d.State)
		}
	}
	s.state = state
	s.pending = pending
	s.needsResume = state == StateProcessing
	return seq, nil
}

// restoreCompaction replaces the compacted turns with the journaled
// summary: the same history the live session had, without a model call.
func (s *Session) restoreCompaction(ev Event) error {
	c := ev.Data.Compaction
	if c == nil || c.Turns <= 0 || c.Turns > len(s.history) {
		turns := 0
		if c != nil {
			turns = c.Turns
		}
		return fmt.Errorf("restore: %s event %d replaces %d turns of a history of %d", ev.Kind, ev.Seq, turns, len(s.history))
	}
	s.replaceHistoryLocked(c.Turns, &SummaryTurn{Content: c.Summary, Timestamp: ev.Time})
	return nil
}

func restoredAssistant(ev Event) *AssistantTurn {
	d := ev.Data
	msg := llm.TextMessage(llm.RoleAssistant, d.Text)
	if d.Assistant != nil {
		msg = *d.Assistant
	}
	t := &AssistantTurn{Content: d.Text, ToolCalls: msg.ToolCalls(), Reasoning: d.Reasoning,
		ResponseID: d.ResponseID, Message: msg, Timestamp: ev.Time}
	if d.Usage != nil {
		t.Usage = *d.Usage
	}
	return t
}

func (s *Session) restoredResult(d EventData) llm.ToolResult {
	r := llm.ToolResult{CallID: d.CallID, Name: d.ToolName, IsError: d.IsError}
	if d.Error != "" {
		r.Content, r.IsError = s.truncate(d.ToolName, d.Error), true
	} else {
		r.Content = s.truncate(d.ToolName, d.Output)
	}
	return r
}

func (p *pendingRound) ordered() []llm.ToolResult {
	out := make([]llm.ToolResult, 0, len(p.calls))
	for _, c := range p.calls {
		out = append(out, p.results[c.ID])
	}
	return out
}

func (s *Session) appendRestored(t Turn) {
	s.history = append(s.history, t)
	s.historyChars += t.size()
}

// Restore creates a session from its journaled events; it is New with
// WithRestore(events). Call Resume when NeedsResume reports true.
func Restore(profile Profile, env tool.ExecutionEnvironment, client Client, events []Event, opts ...Option) (*Session, error) {
	return New(profile, env, client, append(opts, WithRestore(events))...)
}

// NeedsResume reports whether the session was restored in the middle of
// processing and Resume must be called before Submit.
func (s *Session) NeedsResume() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.needsResume
}

// Resume continues a session restored mid-processing: a tool round left
// unfinished is completed (calls whose TOOL_CALL_START was journaled but not
// their TOOL_CALL_END get the InterruptedResult error and are never re-run;
// calls never started run now), then the loop continues where it was (the
// model gets the restored results) and the input finishes as Submit would.
// Resume returns nil at once when there is nothing to resume.
func (s *Session) Resume(ctx context.Context) error {
	return s.run(ctx, true, func(ctx context.Context) error {
		s.mu.Lock()
		if !s.needsResume {
			s.mu.Unlock()
			return nil
		}
		s.needsResume = false
		pending, round := s.pending, s.resumeRound
		s.pending = nil
		if s.pausedAtModel { // paused on a model outage: make that call again
			s.pausedAtModel = false
			s.mu.Unlock()
			natural, err := s.toolLoop(ctx, round)
			if err != nil {
				return err
			}
			return s.finishInput(ctx, natural)
		}
		var last Turn
		if n := len(s.history); n > 0 {
			last = s.history[n-1]
		}
		s.mu.Unlock()

		switch t := last.(type) {
		case *AssistantTurn:
			if pending == nil && len(t.ToolCalls) == 0 {
				return s.finishInput(ctx, true) // the model had answered
			}
			if pending != nil {
				if err := s.completeRound(ctx, pending); err != nil {
					return err
				}
				round++
				if err := s.afterRound(ctx); err != nil {
					return err
				}
			}
		case *ToolResultsTurn:
			if err := s.afterRound(ctx); err != nil {
				return err
			}
		}
		natural, err := s.toolLoop(ctx, round)
		if err != nil {
			return err
		}
		return s.finishInput(ctx, natural)
	})
}

// idempotent reports whether the tool name may run again after a crash
// interrupted it (tool.Registered.Idempotent).
func (s *Session) idempotent(name string) bool {
	t, ok := s.profile.Registry().Get(name)
	return ok && t.Idempotent
}

// completeRound finishes a restored tool round: calls that never started run
// now; calls that started and never ended are reported interrupted, except
// idempotent ones, which run again.
func (s *Session) completeRound(ctx context.Context, p *pendingRound) error {
	var toRun []llm.ToolCall
	for _, c := range p.calls {
		if _, done := p.results[c.ID]; done {
			continue
		}
		if p.started[c.ID] && !s.idempotent(c.Name) {
			if err := s.emitSync(ctx, EventToolCallEnd, EventData{ToolName: c.Name, CallID: c.ID,
				Error: InterruptedResult, IsError: true}); err != nil {
				return err
			}
			p.results[c.ID] = llm.ToolResult{CallID: c.ID, Name: c.Name, Content: InterruptedResult, IsError: true}
			continue
		}
		toRun = append(toRun, c)
	}
	for i, r := range s.executeToolCalls(ctx, toRun) {
		p.results[toRun[i].ID] = r
	}
	s.appendTurn(&ToolResultsTurn{Results: p.ordered(), Timestamp: s.now()})
	return ctx.Err()
}
