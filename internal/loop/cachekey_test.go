package loop_test

import (
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// TestRequestsCarryTheSessionCacheKey checks that every model request of
// a session, across tool rounds and inputs, carries the session id as
// llm.Request.CacheKey (OpenAI's prompt_cache_key).
func TestRequestsCarryTheSessionCacheKey(t *testing.T) {
	env, _ := newEnv(t)
	spy := &spyClient{inner: scripted.New(script(
		tools(call("shell", map[string]string{"command": "echo hi"})),
		text("ran it"),
		text("again"),
	), "m")}
	s, err := loop.New(anthropic(), env, spy, loop.WithID("session-42"))
	if err != nil {
		t.Fatal(err)
	}
	for _, input := range []string{"run echo", "and now?"} {
		if err := s.Submit(t.Context(), input); err != nil {
			t.Fatal(err)
		}
	}
	reqs := spy.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if r.CacheKey != "session-42" {
			t.Errorf("request %d: CacheKey = %q, want the session id", i+1, r.CacheKey)
		}
	}
}
