package loop_test

import (
	"context"
	"encoding/json"
	"iter"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// instantModel answers every request with one no-op tool call until the
// conversation holds rounds assistant turns, then with text.
type instantModel struct{ rounds int }

func (m instantModel) Complete(_ context.Context, req *llm.Request) (*llm.Response, error) {
	n := 0
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleAssistant {
			n++
		}
	}
	msg := llm.Message{Role: llm.RoleAssistant}
	if n < m.rounds {
		msg.Content = []llm.ContentPart{{Kind: llm.PartToolCall,
			ToolCall: &llm.ToolCall{ID: "c", Name: "noop", Arguments: json.RawMessage(`{}`)}}}
	} else {
		msg.Content = []llm.ContentPart{{Kind: llm.PartText, Text: "done"}}
	}
	return &llm.Response{Message: msg}, nil
}

func (m instantModel) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	return func(yield func(llm.StreamEvent, error) bool) {
		resp, err := m.Complete(ctx, req)
		if err != nil {
			yield(llm.StreamEvent{}, err)
			return
		}
		yield(llm.StreamEvent{Type: llm.EventFinish, Response: resp}, nil)
	}
}

// BenchmarkToolRound measures the loop's overhead per tool round (request
// building, events, validation, truncation) with a no-op tool and an instant
// model. Each op is one round; history grows across the rounds of an input
// as in a real session (100 rounds per input).
func BenchmarkToolRound(b *testing.B) {
	env, err := newBenchEnv(b)
	if err != nil {
		b.Fatal(err)
	}
	p := profile.Anthropic("claude-sonnet-4-5")
	if err := p.Register(tool.Registered{
		Definition: tool.Definition{Name: "noop", Parameters: json.RawMessage(`{"type":"object"}`)},
		Executor:   func(context.Context, *tool.Invocation) (tool.Result, error) { return tool.Result{Output: "ok"}, nil },
	}); err != nil {
		b.Fatal(err)
	}
	cfg := loop.DefaultConfig()
	cfg.EnableLoopDetection = false
	const perInput = 100
	b.ResetTimer()
	for done := 0; done < b.N; done += perInput {
		b.StopTimer()
		s, err := loop.New(withCaps(p, func(c *loop.Capabilities) { c.Streaming = false }), env,
			instantModel{rounds: perInput}, loop.WithConfig(cfg))
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range s.Events() {
			}
		}()
		b.StartTimer()
		if err := s.Submit(b.Context(), "go"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = s.Close()
		b.StartTimer()
	}
}
