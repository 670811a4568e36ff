package loop_test

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// capsProfile overrides the capabilities of a real profile.
type capsProfile struct {
	loop.Profile
	caps loop.Capabilities
}

func (p capsProfile) Capabilities() loop.Capabilities { return p.caps }

// withCaps returns p with its capabilities changed by f.
func withCaps(p loop.Profile, f func(*loop.Capabilities)) loop.Profile {
	c := p.Capabilities()
	f(&c)
	return capsProfile{Profile: p, caps: c}
}

// The shared helpers of internal/looptest, under the names these
// tests use.
var (
	newEnv      = looptest.NewEnv
	call        = looptest.Call
	text        = looptest.Text
	tools       = looptest.Tools
	script      = looptest.Script
	record      = looptest.Record
	ofKind      = looptest.OfKind
	customTool  = looptest.CustomTool
	lastResults = looptest.LastResults
)

// scriptedClient replays s in memory.
func scriptedClient(_ *testing.T, p loop.Profile, s *scripted.Script) loop.Client {
	return scripted.New(s, p.Model())
}

func kinds(evs []loop.Event) []loop.EventKind {
	out := make([]loop.EventKind, 0, len(evs))
	for _, e := range evs {
		if e.Kind != loop.EventAssistantTextDelta && e.Kind != loop.EventToolCallOutputDelta {
			out = append(out, e.Kind)
		}
	}
	return out
}

// checkSeq asserts Seq runs 1, 2, 3... with no gaps and one session id.
func checkSeq(t *testing.T, evs []loop.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d (%s) has seq %d", i, e.Kind, e.Seq)
		}
		if e.SessionID != evs[0].SessionID || e.SessionID == "" {
			t.Fatalf("event %d has session %q", i, e.SessionID)
		}
		if e.Time.IsZero() {
			t.Fatalf("event %d has no timestamp", i)
		}
	}
}

// newSession creates a session over a scripted client.
func newSession(t *testing.T, p loop.Profile, env tool.ExecutionEnvironment, s *scripted.Script, opts ...loop.Option) *loop.Session {
	t.Helper()
	return looptest.NewSession(t, scriptedClient, p, env, s, opts...)
}

// spyClient records requests and delegates to a scripted client.
type spyClient struct {
	inner loop.Client
	mu    sync.Mutex
	reqs  []*llm.Request
}

func (c *spyClient) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return c.inner.Complete(ctx, req)
}

func (c *spyClient) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return c.inner.Stream(ctx, req)
}

func (c *spyClient) requests() []*llm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs)
}

func anthropic() loop.Profile { return profile.Anthropic("claude-sonnet-4-5") }

func mustf(t *testing.T, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Fatalf(format, args...)
	}
}

var _ = fmt.Sprintf
