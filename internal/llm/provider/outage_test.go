package provider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	llmprovider "github.com/agent-operator/agent-operator/internal/llm/provider"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// outageSession is a loop Session over the real adapter of prov, talking to
// the wire-protocol server replaying sc with attempts tries per model call.
func outageSession(t *testing.T, prov looptest.Provider, sc *scripted.Script, attempts int, opts ...loop.Option) (*loop.Session, *llmtest.Server, *looptest.Recorder) {
	t.Helper()
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	p := prov.New()
	srv := llmtest.StartScript(t, protocols[p.ID()], sc)
	c, err := llmprovider.New(llmprovider.Config{Provider: p.ID(), Model: p.Model(), BaseURL: srv.BaseURL(), APIKey: "outage-key",
		Retry: llm.RetryPolicy{MaxAttempts: attempts, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := looptest.NewEnv(t)
	s, err := loop.New(p, env, c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, srv, looptest.Record(s)
}

// A stream cut after part of the answer is retried like one cut before it:
// the partial answer never reaches history, and the events carry the answer
// once (one ASSISTANT_TEXT_END), each discarded attempt closed by a WARNING
// and a new ASSISTANT_TEXT_START.
func TestStreamCutMidAnswerIsRetriedAndRecordedOnce(t *testing.T) {
	const answer = "The answer, streamed in full."
	for _, prov := range looptest.Providers {
		t.Run(prov.Name, func(t *testing.T) {
			sc := looptest.Script(scripted.Turn{Text: answer,
				Error: &scripted.Error{Kind: llm.KindServer, Message: "connection reset", MidStream: true, Times: 3}})
			s, srv, rec := outageSession(t, prov, sc, 4)
			if err := s.Submit(t.Context(), "question"); err != nil {
				t.Fatalf("Submit: %v", err)
			}
			_ = s.Close()
			if n := len(srv.Requests()); n != 4 {
				t.Errorf("server got %d requests, want 4 (3 cut, 1 whole)", n)
			}
			var assistants []string
			for _, turn := range s.History() {
				if a, ok := turn.(*loop.AssistantTurn); ok {
					assistants = append(assistants, a.Content)
				}
			}
			if len(assistants) != 1 || assistants[0] != answer {
				t.Errorf("assistant turns in history %q, want exactly one %q", assistants, answer)
			}
			evs := rec.All(t)
			ends := looptest.OfKind(evs, loop.EventAssistantTextEnd)
			if len(ends) != 1 || ends[0].Data.Text != answer {
				t.Errorf("ASSISTANT_TEXT_END events %+v, want one with the answer", ends)
			}
			restarts := 0
			for _, w := range looptest.OfKind(evs, loop.EventWarning) {
				if w.Data.Message == loop.StreamRestartWarning {
					restarts++
				}
			}
			if starts := len(looptest.OfKind(evs, loop.EventAssistantTextStart)); restarts != 3 || starts != 4 {
				t.Errorf("%d restart warnings and %d ASSISTANT_TEXT_START, want 3 and 4", restarts, starts)
			}
			// The deltas after the last ASSISTANT_TEXT_START spell the answer once.
			var last strings.Builder
			for _, ev := range evs {
				switch ev.Kind {
				case loop.EventAssistantTextStart:
					last.Reset()
				case loop.EventAssistantTextDelta:
					last.WriteString(ev.Data.Delta)
				}
			}
			if last.String() != answer {
				t.Errorf("deltas of the last attempt %q, want %q", last.String(), answer)
			}
		})
	}
}

// A model that keeps failing with a transient error (HTTP 529 overloaded)
// pauses a session made WithPauseOnModelOutage instead of closing it; Resume
// makes the same call again, and once the model answers the input finishes
// as if nothing had happened.
func TestModelOutagePausesTheSessionAndResumeFinishesIt(t *testing.T) {
	for _, prov := range looptest.Providers {
		t.Run(prov.Name, func(t *testing.T) {
			sc := looptest.Script(
				looptest.Tools(looptest.Call("shell", map[string]string{"command": "echo one"})),
				scripted.Turn{Text: "done", Error: &scripted.Error{Kind: llm.KindServer, StatusCode: 529, Code: "overloaded_error",
					Message: "Overloaded", Times: 5}},
			)
			s, srv, rec := outageSession(t, prov, sc, 2, loop.WithPauseOnModelOutage())
			err := s.Submit(t.Context(), "go")
			if !errors.Is(err, loop.ErrModelUnavailable) || llm.KindOf(err) != llm.KindServer {
				t.Fatalf("Submit = %v, want ErrModelUnavailable wrapping the server error", err)
			}
			if s.State() != loop.StateProcessing || !s.NeedsResume() {
				t.Fatalf("state %s, needs resume %v: a paused session stays PROCESSING and resumable", s.State(), s.NeedsResume())
			}
			if err := s.Submit(t.Context(), "another"); !errors.Is(err, loop.ErrResumeRequired) {
				t.Fatalf("Submit while paused = %v, want ErrResumeRequired", err)
			}
			if err := s.Resume(t.Context()); !errors.Is(err, loop.ErrModelUnavailable) {
				t.Fatalf("first Resume = %v, want still unavailable", err)
			}
			if err := s.Resume(t.Context()); err != nil {
				t.Fatalf("second Resume: %v", err)
			}
			if s.State() != loop.StateIdle {
				t.Fatalf("state %s after the model answered, want IDLE", s.State())
			}
			_ = s.Close()
			// 1 shell turn + 2 + 2 failed attempts + 1 failed and 1 answered.
			if n := len(srv.Requests()); n != 7 {
				t.Errorf("server got %d requests, want 7", n)
			}
			evs := rec.All(t)
			if n := len(looptest.OfKind(evs, loop.EventToolCallEnd)); n != 1 {
				t.Errorf("%d TOOL_CALL_END, want the shell call once", n)
			}
			if n := len(looptest.OfKind(evs, loop.EventUserInput)); n != 1 {
				t.Errorf("%d USER_INPUT, want 1", n)
			}
			ends := looptest.OfKind(evs, loop.EventSessionEnd)
			if len(ends) != 2 || ends[0].Data.State != string(loop.StateIdle) || ends[1].Data.State != string(loop.StateClosed) {
				t.Errorf("SESSION_END events %+v, want IDLE then CLOSED (from Close)", ends)
			}
		})
	}
}

// Without WithPauseOnModelOutage the same outage closes the session.
func TestModelOutageClosesASessionThatDoesNotPause(t *testing.T) {
	prov := looptest.Providers[1]
	sc := looptest.Script(scripted.Turn{Text: "done", Error: &scripted.Error{Kind: llm.KindServer, StatusCode: 529,
		Code: "overloaded_error", Message: "Overloaded", Times: 5}})
	s, _, _ := outageSession(t, prov, sc, 2)
	if err := s.Submit(t.Context(), "go"); errors.Is(err, loop.ErrModelUnavailable) || llm.KindOf(err) != llm.KindServer {
		t.Fatalf("Submit = %v", err)
	}
	if s.State() != loop.StateClosed {
		t.Fatalf("state %s, want CLOSED", s.State())
	}
}
