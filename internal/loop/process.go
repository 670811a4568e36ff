package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// processInputs runs process_input for input and then for every queued
// follow-up (seed 000 §2.5), and settles the state.
func (s *Session) processInputs(ctx context.Context, input string) error {
	natural, err := s.processInput(ctx, input, false)
	if err != nil {
		return err
	}
	return s.finishInput(ctx, natural)
}

// finishInput processes queued follow-ups, then moves to IDLE (or
// AWAITING_INPUT when the model asked a question) and emits SESSION_END.
func (s *Session) finishInput(ctx context.Context, natural bool) error {
	for {
		next, ok := s.dequeueFollowUp()
		if !ok {
			break
		}
		var err error
		if natural, err = s.processInput(ctx, next, true); err != nil {
			return err
		}
	}
	s.mu.Lock()
	to := StateIdle
	if natural && asksQuestion(s.lastText) {
		to = StateAwaitingInput
	}
	err := s.transitionLocked(to)
	text := s.lastText
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.emitSync(ctx, EventSessionEnd, EventData{State: string(to), Text: text})
}

// asksQuestion is the AWAITING_INPUT heuristic: a text-only final answer
// whose last non-blank character is a question mark.
func asksQuestion(text string) bool {
	return strings.HasSuffix(strings.TrimSpace(text), "?")
}

func (s *Session) dequeueFollowUp() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.followups) == 0 {
		return "", false
	}
	next := s.followups[0]
	s.followups = s.followups[1:]
	return next, true
}

// processInput is process_input of seed 000 §2.5 up to the end of the loop.
// natural reports a text-only completion (as opposed to a limit).
func (s *Session) processInput(ctx context.Context, input string, followUp bool) (natural bool, err error) {
	if err := s.transition(StateProcessing); err != nil {
		return false, err
	}
	s.appendTurn(&UserTurn{Content: input, Timestamp: s.now()})
	if err := s.emitSync(ctx, EventUserInput, EventData{Content: input, FollowUp: followUp}); err != nil {
		return false, err
	}
	if err := s.drainSteering(ctx); err != nil {
		return false, err
	}
	return s.toolLoop(ctx, 0)
}

// toolLoop is the LOOP of process_input, starting at round.
func (s *Session) toolLoop(ctx context.Context, round int) (bool, error) {
	for {
		if stop, err := s.checkLimits(ctx, round); stop || err != nil {
			return false, err
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		// Between turns only: tool sources may have changed (toolsource.go).
		if err := s.refreshToolSources(ctx); err != nil {
			return false, err
		}
		s.loadFound() // tools tool_search returned are offered from this request on
		req := s.request()
		compacted, err := s.maybeCompact(ctx, req, false)
		if err != nil {
			return false, err
		}
		if compacted {
			req = s.request()
		}
		resp, err := s.callModel(ctx, req)
		if err != nil && llm.KindOf(err) == llm.KindContextLength && ctx.Err() == nil {
			resp, err = s.retryAfterOverflow(ctx, err)
		}
		if err != nil {
			return false, s.modelError(ctx, err, round)
		}
		calls, err := s.recordAssistant(ctx, resp)
		if err != nil {
			return false, err
		}
		if len(calls) == 0 {
			return true, nil
		}
		round++
		results := s.executeToolCalls(ctx, calls)
		s.appendTurn(&ToolResultsTurn{Results: results, Timestamp: s.now()})
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if err := s.afterRound(ctx); err != nil {
			return false, err
		}
	}
}

// afterRound drains steering and runs loop detection (steps 7 and 8).
func (s *Session) afterRound(ctx context.Context) error {
	if err := s.drainSteering(ctx); err != nil {
		return err
	}
	if !s.cfg.EnableLoopDetection || !detectLoop(s.History(), s.cfg.LoopDetectionWindow) {
		return nil
	}
	warning := fmt.Sprintf("Loop detected: the last %d tool calls follow a repeating pattern. Try a different approach.",
		s.cfg.LoopDetectionWindow)
	s.appendTurn(&SteeringTurn{Content: warning, Timestamp: s.now()})
	return s.emitSync(ctx, EventLoopDetection, EventData{Message: warning})
}

// checkLimits emits TURN_LIMIT when a limit stops the loop.
func (s *Session) checkLimits(ctx context.Context, round int) (bool, error) {
	if s.cfg.MaxToolRoundsPerInput > 0 && round >= s.cfg.MaxToolRoundsPerInput {
		return true, s.emit(ctx, EventTurnLimit, EventData{Round: round})
	}
	s.mu.Lock()
	turns := s.turns
	s.mu.Unlock()
	if s.cfg.MaxTurns > 0 && turns >= s.cfg.MaxTurns {
		return true, s.emit(ctx, EventTurnLimit, EventData{TotalTurns: turns})
	}
	return false, nil
}

func (s *Session) drainSteering(ctx context.Context) error {
	for {
		s.mu.Lock()
		if len(s.steering) == 0 {
			s.mu.Unlock()
			return nil
		}
		msg := s.steering[0]
		s.steering = s.steering[1:]
		s.history = append(s.history, &SteeringTurn{Content: msg, Timestamp: s.now()})
		s.historyChars += len(msg)
		s.mu.Unlock()
		if err := s.emitSync(ctx, EventSteeringInjected, EventData{Content: msg}); err != nil {
			return err
		}
	}
}

// callModel sends req, the request for the current history (request), as
// one model call, streaming when the profile supports it, and records its
// usage.
func (s *Session) callModel(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	_, chars := requestChars(req)
	resp, err := s.callModelWith(ctx, req)
	if err == nil {
		tokens := s.noteUsage(chars, resp.Usage)
		s.mu.Lock()
		s.lastRequest = ContextUsage{Window: s.contextWindow(), RequestTokens: tokens}
		s.mu.Unlock()
	}
	return resp, err
}

// callModelWith sends req, streaming when the profile supports it.
func (s *Session) callModelWith(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := s.emit(ctx, EventAssistantTextStart, EventData{}); err != nil {
		return nil, err
	}
	if !s.profile.Capabilities().Streaming {
		resp, err := s.client.Complete(ctx, req)
		if err == nil && resp == nil {
			err = errors.New("model returned no response")
		}
		return resp, err
	}
	var resp *llm.Response
	for ev, err := range s.client.Stream(ctx, req) {
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case llm.EventTextDelta:
			s.em.emitDelta(EventAssistantTextDelta, "", ev.Delta)
		case llm.EventRestart:
			// The stream was cut after some output and the client retries:
			// what was streamed is discarded (it never reaches history), and
			// a new ASSISTANT_TEXT_START tells readers to drop its deltas.
			if err := s.emit(ctx, EventWarning, EventData{Message: StreamRestartWarning}); err != nil {
				return nil, err
			}
			if err := s.emit(ctx, EventAssistantTextStart, EventData{}); err != nil {
				return nil, err
			}
		case llm.EventFinish:
			resp = ev.Response
		}
	}
	if resp == nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, &llm.Error{Kind: llm.KindNetwork, Provider: s.profile.ID(), Message: "stream ended without a finish event"}
	}
	return resp, nil
}

// recordAssistant appends the AssistantTurn and emits ASSISTANT_TEXT_END.
func (s *Session) recordAssistant(ctx context.Context, resp *llm.Response) ([]llm.ToolCall, error) {
	msg := resp.Message
	msg.Role = llm.RoleAssistant
	turn := &AssistantTurn{
		Content: resp.Text(), ToolCalls: resp.ToolCalls(), Reasoning: resp.Reasoning(),
		Usage: resp.Usage, ResponseID: resp.ID, Message: msg, Timestamp: s.now(),
	}
	s.mu.Lock()
	s.history = append(s.history, turn)
	s.historyChars += turn.size()
	s.turns++
	s.lastText = turn.Content
	chars := s.historyChars
	s.mu.Unlock()
	usage := resp.Usage
	s.mu.Lock()
	cu := s.lastRequest
	s.mu.Unlock()
	if err := s.emitSync(ctx, EventAssistantTextEnd, EventData{
		Text: turn.Content, Reasoning: turn.Reasoning, Usage: &usage, ResponseID: resp.ID, Assistant: &msg,
		Context: &cu, WebSearches: msg.WebSearches(), Citations: msg.Citations(),
	}); err != nil {
		return nil, err
	}
	if err := s.checkContextUsage(ctx, chars); err != nil {
		return nil, err
	}
	return turn.ToolCalls, nil
}

// checkContextUsage emits WARNING above 80% of the context window
// (seed 000 §5.5, 1 token ~ 4 characters).
func (s *Session) checkContextUsage(ctx context.Context, chars int) error {
	window := s.contextWindow()
	if window <= 0 {
		return nil
	}
	tokens := chars / 4
	if float64(tokens) <= float64(window)*0.8 {
		return nil
	}
	pct := (tokens*100 + window/2) / window
	return s.emit(ctx, EventWarning, EventData{Message: fmt.Sprintf("Context usage at ~%d%% of context window", pct)})
}

// StreamRestartWarning is the WARNING emitted when a model stream was cut
// after part of the answer had streamed and the call is made again.
const StreamRestartWarning = "The model's response stream was cut; retrying the call. The partial answer above is discarded."

// modelError reports a failed model call (seed 000 Appendix B). The
// returned error closes the session, except a transient one in a session
// that pauses on model outages (it wraps ErrModelUnavailable, and Resume
// repeats the call of round); cancellation is passed through.
func (s *Session) modelError(ctx context.Context, err error, round int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	kind := llm.KindOf(err)
	if kind == llm.KindContextLength {
		if werr := s.emit(ctx, EventWarning, EventData{Message: "Context window exceeded: " + err.Error()}); werr != nil {
			return werr
		}
	}
	if eerr := s.emit(ctx, EventError, EventData{Message: err.Error(), ErrorKind: string(kind)}); eerr != nil {
		return eerr
	}
	var le *llm.Error
	if s.pauseOnOutage && errors.As(err, &le) && le.Retryable() {
		if serr := s.sync(ctx); serr != nil {
			return serr
		}
		s.mu.Lock()
		s.needsResume, s.pausedAtModel, s.resumeRound, s.pending = true, true, round, nil
		s.mu.Unlock()
		return fmt.Errorf("call model: %w: %w", ErrModelUnavailable, err)
	}
	if kind == llm.KindContextLength {
		s.mu.Lock()
		tried := s.overflow
		s.mu.Unlock()
		return fmt.Errorf("call model: %w (the conversation no longer fits the model's context window: %s; "+
			"start a new session with a shorter task)", err, tried)
	}
	return fmt.Errorf("call model: %w", err)
}
