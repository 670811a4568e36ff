package provider_test

import (
	"fmt"
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

// longSession answers a session that reads a 20 KB file turns times and then
// says done; requests carrying loop.CompactionPrompt get a summary. The
// server reports len(body)/4 input tokens, as a provider reports its count.
type longSession struct {
	turns       int
	main        int
	compactions int
	// model counts summary requests naming this model (URL or body).
	model      string
	modelCalls int
}

func (l *longSession) respond(rec llmtest.Request, req *llm.Request) (scripted.Reply, error) {
	usage := llm.Usage{InputTokens: int64(len(rec.RawBody) / 4), OutputTokens: 20}
	msg := llm.Message{Role: llm.RoleAssistant}
	finish := llm.FinishStop
	switch {
	case strings.Contains(string(rec.RawBody), loop.CompactionPrompt[:40]):
		l.compactions++
		if l.model != "" && strings.Contains(rec.Path+string(rec.RawBody), l.model) {
			l.modelCalls++
		}
		msg.Content = []llm.ContentPart{{Kind: llm.PartText, Text: fmt.Sprintf("The agent read big.txt %d times.", l.main)}}
	case l.main < l.turns:
		l.main++
		msg.Content = []llm.ContentPart{{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{
			ID: fmt.Sprintf("call_%d", l.main), Name: "read_file", Arguments: []byte(`{"file_path":"big.txt"}`)}}}
		finish = llm.FinishToolCalls
	default:
		l.main++
		msg.Content = []llm.ContentPart{{Kind: llm.PartText, Text: "done"}}
	}
	return scripted.Reply{Response: &llm.Response{ID: fmt.Sprintf("resp_%d", l.main), Message: msg,
		FinishReason: finish, Usage: usage}}, nil
}

// A 200-turn session whose every tool result is 20 KB, through each real
// adapter and its wire-protocol server: with compaction on, every request
// the server receives stays under the configured window and the summaries
// go through the same protocol, asking for the configured compaction model; with compaction off, the requests grow past
// the window within 20 turns (so the assertion can fail).
func TestCompactionKeepsEveryRequestUnderTheWindow(t *testing.T) {
	const window = 60_000 // tokens; 20 KB is ~5,000
	// Each profile over its provider's wire, and the openai profile also over Chat Completions
	// (provider openai-compatible: vLLM, Ollama, LiteLLM).
	type wire struct {
		prov     looptest.Provider
		provider string
		proto    llmtest.Protocol
	}
	var wires []wire
	for _, prov := range looptest.Providers {
		id := prov.New().ID()
		wires = append(wires, wire{prov, id, protocols[id]})
		if id == "openai" {
			wires = append(wires, wire{prov, llmprovider.OpenAICompatible, llmtest.ChatCompletions})
		}
	}
	for _, w := range wires {
		prov := w.prov
		for _, on := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%s/compaction=%v", prov.Name, w.provider, on), func(t *testing.T) {
				turns := 200
				if !on {
					turns = 20
				}
				ls := &longSession{turns: turns, model: "compaction-model"}
				p := prov.New()
				srv := llmtest.Start(t, llmtest.NewResponderHandler(w.proto, ls.respond))
				c, err := llmprovider.New(llmprovider.Config{Provider: w.provider, Model: p.Model(), BaseURL: srv.BaseURL(),
					APIKey: "compaction-key", Retry: llm.RetryPolicy{MaxAttempts: 1}})
				if err != nil {
					t.Fatal(err)
				}
				env, dir := looptest.NewEnv(t)
				line := strings.Repeat("x", 79) + "\n"
				looptest.WriteFile(t, dir, "big.txt", strings.Repeat(line, 20*1024/len(line)))
				cfg := loop.DefaultConfig()
				cfg.EnableLoopDetection = false // the same call 200 times is the point
				cfg.StaleToolResultTurns = -1   // compaction alone keeps the requests small
				cfg.Compaction.ContextWindow = window
				cfg.Compaction.Disabled = !on
				cfg.Compaction.Model = ls.model
				s, err := loop.New(p, env, c, loop.WithConfig(cfg))
				if err != nil {
					t.Fatal(err)
				}
				rec := looptest.Record(s)
				start := time.Now()
				if err := s.Submit(t.Context(), "read big.txt again and again"); err != nil {
					t.Fatalf("Submit: %v", err)
				}
				_ = s.Close()
				evs := rec.All(t)
				largest := 0
				for _, r := range srv.Requests() {
					largest = max(largest, len(r.RawBody)/4)
				}
				compacted := looptest.OfKind(evs, loop.EventContextCompacted)
				t.Logf("%d requests, largest ~%d tokens, %d compactions, %s", len(srv.Requests()), largest, len(compacted),
					time.Since(start).Round(time.Millisecond))
				if n := len(looptest.OfKind(evs, loop.EventToolCallEnd)); n != turns {
					t.Errorf("%d tool calls ran, want %d", n, turns)
				}
				if !on {
					if largest <= window {
						t.Errorf("largest request ~%d tokens without compaction, want it past the %d window", largest, window)
					}
					if len(compacted) != 0 {
						t.Errorf("%d CONTEXT_COMPACTED events with compaction off", len(compacted))
					}
					return
				}
				if largest >= window {
					t.Errorf("largest request ~%d tokens, want every request under the %d window", largest, window)
				}
				if ls.modelCalls != ls.compactions {
					t.Errorf("%d of %d summary requests asked for %s", ls.modelCalls, ls.compactions, ls.model)
				}
				if len(compacted) == 0 || ls.compactions != len(compacted) {
					t.Fatalf("%d CONTEXT_COMPACTED events and %d summary requests on the wire, want the same non-zero number",
						len(compacted), ls.compactions)
				}
				for _, ev := range compacted {
					c := ev.Data.Compaction
					if c.Dropped || c.TokensAfter >= c.TokensBefore || c.Turns == 0 ||
						!strings.Contains(c.Summary, "The agent read big.txt") {
						t.Errorf("compaction %+v: want a summary from the model that shrank the request", c)
					}
				}
			})
		}
	}
}

// compactionSession is a session reading a 20 KB file in turns, over the
// real adapter of prov and a server answering with respond.
func compactionSession(t *testing.T, prov looptest.Provider, respond llmtest.Responder, cfg loop.SessionConfig,
	opts ...loop.Option) (*loop.Session, *llmtest.Server, *looptest.Recorder) {
	t.Helper()
	p := prov.New()
	srv := llmtest.Start(t, llmtest.NewResponderHandler(protocols[p.ID()], respond))
	c, err := llmprovider.New(llmprovider.Config{Provider: p.ID(), Model: p.Model(), BaseURL: srv.BaseURL(),
		APIKey: "compaction-key", Retry: llm.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	env, dir := looptest.NewEnv(t)
	line := strings.Repeat("x", 79) + "\n"
	looptest.WriteFile(t, dir, "big.txt", strings.Repeat(line, 20*1024/len(line)))
	cfg.EnableLoopDetection = false
	cfg.StaleToolResultTurns = -1
	s, err := loop.New(p, env, c, append([]loop.Option{loop.WithConfig(cfg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, srv, looptest.Record(s)
}

// isSummaryRequest reports whether a request on the wire is a compaction
// summary call.
func isSummaryRequest(r llmtest.Request) bool {
	return strings.Contains(string(r.RawBody), loop.CompactionPrompt[:40])
}

// A provider that rejects a request as too long (the server enforces the
// window; the session's window is the profile's much larger one) gets one
// forced compaction and the same request again; the session finishes.
// When even the compacted request is rejected, the session fails with an
// error saying compaction was tried.
func TestContextLengthErrorForcesOneCompactionAndARetry(t *testing.T) {
	const serverWindow = 30_000
	for _, prov := range looptest.Providers {
		t.Run(prov.Name, func(t *testing.T) {
			ls := &longSession{turns: 12}
			enforce := func(rec llmtest.Request, req *llm.Request) (scripted.Reply, error) {
				if !isSummaryRequest(rec) && len(rec.RawBody)/4 > serverWindow {
					return scripted.Reply{Err: &llm.Error{Kind: llm.KindContextLength}}, nil
				}
				return ls.respond(rec, req)
			}
			s, srv, rec := compactionSession(t, prov, enforce, loop.DefaultConfig())
			if err := s.Submit(t.Context(), "read big.txt again and again"); err != nil {
				t.Fatalf("Submit: %v", err)
			}
			_ = s.Close()
			evs := rec.All(t)
			compacted := looptest.OfKind(evs, loop.EventContextCompacted)
			if len(compacted) == 0 {
				t.Fatal("no CONTEXT_COMPACTED event")
			}
			for _, ev := range compacted {
				if !ev.Data.Compaction.Forced {
					t.Errorf("compaction %+v not forced: the profile's window is far away", ev.Data.Compaction)
				}
			}
			rejected := 0
			for _, r := range srv.Requests() {
				if !isSummaryRequest(r) && len(r.RawBody)/4 > serverWindow {
					rejected++
				}
			}
			if rejected != len(compacted) {
				t.Errorf("%d requests rejected as too long and %d compactions, want one compaction per rejection", rejected, len(compacted))
			}
			if n := len(looptest.OfKind(evs, loop.EventToolCallEnd)); n != ls.turns {
				t.Errorf("%d tool calls, want %d", n, ls.turns)
			}
		})
	}
	t.Run("still too long after compaction", func(t *testing.T) {
		ls := &longSession{turns: 12}
		reject := func(rec llmtest.Request, req *llm.Request) (scripted.Reply, error) {
			if !isSummaryRequest(rec) && ls.main >= 4 {
				return scripted.Reply{Err: &llm.Error{Kind: llm.KindContextLength}}, nil
			}
			return ls.respond(rec, req)
		}
		s, _, rec := compactionSession(t, looptest.Providers[1], reject, loop.DefaultConfig())
		err := s.Submit(t.Context(), "read big.txt again and again")
		if llm.KindOf(err) != llm.KindContextLength || !strings.Contains(err.Error(), "compacted once and the request retried") {
			t.Fatalf("Submit = %v, want the context-length error saying compaction was tried", err)
		}
		if n := len(looptest.OfKind(rec.All(t), loop.EventContextCompacted)); n != 1 {
			t.Errorf("%d CONTEXT_COMPACTED events, want exactly one forced compaction", n)
		}
	})
}

// When the summary call fails the oldest turns are dropped instead and the
// session goes on; every request still fits the window.
func TestFailedSummaryDropsOldTurnsAndTheSessionContinues(t *testing.T) {
	const window = 60_000
	ls := &longSession{turns: 40}
	failSummary := func(rec llmtest.Request, req *llm.Request) (scripted.Reply, error) {
		if isSummaryRequest(rec) {
			return scripted.Reply{Err: &llm.Error{Kind: llm.KindInvalidRequest, StatusCode: 400, Message: "summaries are broken"}}, nil
		}
		return ls.respond(rec, req)
	}
	cfg := loop.DefaultConfig()
	cfg.Compaction.ContextWindow = window
	s, srv, rec := compactionSession(t, looptest.Providers[0], failSummary, cfg)
	if err := s.Submit(t.Context(), "read big.txt again and again"); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	_ = s.Close()
	compacted := looptest.OfKind(rec.All(t), loop.EventContextCompacted)
	if len(compacted) == 0 {
		t.Fatal("no CONTEXT_COMPACTED event")
	}
	for _, ev := range compacted {
		c := ev.Data.Compaction
		if !c.Dropped || !strings.Contains(c.Error, "summaries are broken") || !strings.Contains(c.Summary, "dropped") {
			t.Errorf("compaction %+v, want the turns dropped with the summary error", c)
		}
	}
	for _, r := range srv.Requests() {
		if len(r.RawBody)/4 >= window {
			t.Errorf("a request of ~%d tokens, want all under %d", len(r.RawBody)/4, window)
		}
	}
}

// A session restored from events that end right after a CONTEXT_COMPACTED
// (the manager died there) rebuilds the compacted history from the journal:
// its first request is byte-identical to the one the original session sent
// after compacting, no summary call is made, and the session finishes.
func TestRestoreAfterCompactionRebuildsTheSameHistoryWithoutASummaryCall(t *testing.T) {
	for _, tc := range []struct {
		prov   looptest.Provider
		window int
	}{
		{looptest.Providers[0], 40_000}, {looptest.Providers[1], 40_000}, {looptest.Providers[2], 40_000},
		{looptest.Providers[1], 12_000}, // one round alone is over the threshold
	} {
		prov, window := tc.prov, tc.window
		t.Run(fmt.Sprintf("%s/window=%d", prov.Name, window), func(t *testing.T) {
			cfg := loop.DefaultConfig()
			cfg.Compaction.ContextWindow = window
			ls := &longSession{turns: 15}
			s, srv, rec := compactionSession(t, prov, ls.respond, cfg, loop.WithID("restore-after-compaction"))
			if err := s.Submit(t.Context(), "read big.txt again and again"); err != nil {
				t.Fatalf("Submit: %v", err)
			}
			_ = s.Close()
			evs := rec.All(t)
			cut := -1
			for i, ev := range evs {
				if ev.Kind == loop.EventContextCompacted {
					cut = i
					break
				}
			}
			if cut < 0 {
				t.Fatal("the first session never compacted")
			}
			reqs := srv.Requests()
			next := -1
			for i, r := range reqs {
				if isSummaryRequest(r) {
					next = i + 1
					break
				}
			}
			journal := evs[:cut+1]
			done := len(looptest.OfKind(journal, loop.EventAssistantTextEnd))
			ls2 := &longSession{turns: 15, main: done}
			s2, srv2, rec2 := compactionSession(t, prov, ls2.respond, cfg, loop.WithRestore(journal))
			if !s2.NeedsResume() {
				t.Fatal("restored session does not need Resume")
			}
			if err := s2.Resume(t.Context()); err != nil {
				t.Fatalf("Resume: %v", err)
			}
			_ = s2.Close()
			got := srv2.Requests()
			// The two sessions differ only in their workspace directory.
			if len(got) == 0 || strings.ReplaceAll(string(reqs[next].RawBody), "/001", "/002") != string(got[0].RawBody) {
				t.Errorf("first request after restore differs from the original's request after compacting")
			}
			if len(got) > 0 && isSummaryRequest(got[0]) {
				t.Errorf("restored session made a summary call first")
			}
			evs2 := rec2.All(t)
			if n := len(looptest.OfKind(evs2, loop.EventToolCallEnd)); n != 15-done {
				t.Errorf("%d tool calls after restore, want %d", n, 15-done)
			}
			ends := looptest.OfKind(evs2, loop.EventSessionEnd)
			if len(ends) == 0 || ends[0].Data.State != string(loop.StateIdle) {
				t.Errorf("SESSION_END events %+v, want the input finished IDLE", ends)
			}
		})
	}
}
