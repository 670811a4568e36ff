package openai

import (
	"encoding/json"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
)

// checkCacheKey asserts that every request of the suite's prompt-caching
// conversation carries Request.CacheKey as prompt_cache_key.
func checkCacheKey(t *testing.T, reqs []llmtest.Request) {
	for i, r := range reqs {
		if got := r.Body["prompt_cache_key"]; got != llmtest.CacheKey {
			t.Errorf("request %d: prompt_cache_key = %v, want %q", i+1, got, llmtest.CacheKey)
		}
	}
}

func TestPromptCacheKey(t *testing.T) {
	tests := []struct {
		name     string
		protocol llmtest.Protocol
		cacheKey string
		options  map[string]json.RawMessage
		want     any // the prompt_cache_key on the wire; nil when absent
	}{
		{"responses: the request's key", llmtest.OpenAIResponses, "sess-1", nil, "sess-1"},
		{"responses: no key, no field", llmtest.OpenAIResponses, "", nil, nil},
		{"responses: the provider option wins", llmtest.OpenAIResponses, "sess-1",
			map[string]json.RawMessage{ProviderName: json.RawMessage(`{"prompt_cache_key":"shared"}`)}, "shared"},
		{"responses: the provider option alone", llmtest.OpenAIResponses, "",
			map[string]json.RawMessage{ProviderName: json.RawMessage(`{"prompt_cache_key":"shared"}`)}, "shared"},
		{"chat: the request's key", llmtest.ChatCompletions, "sess-1", nil, "sess-1"},
		{"chat: no key, no field", llmtest.ChatCompletions, "", nil, nil},
		{"chat: no_prompt_cache_key leaves it out", llmtest.ChatCompletions, "sess-1",
			map[string]json.RawMessage{CompatProviderName: json.RawMessage(`{"no_prompt_cache_key":true}`)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				srv := llmtest.StartScript(t, tt.protocol, llmtest.ParseScript(t, `turns: [{text: ok}]`))
				tg := llmtest.Target{BaseURL: srv.BaseURL(), APIKey: "k", Model: "m"}
				var c llm.Client = newResponses(t, tg)
				if tt.protocol == llmtest.ChatCompletions {
					c = newCompat(t, tg)
				}
				req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}, CacheKey: tt.cacheKey, ProviderOptions: tt.options}
				var err error
				if stream {
					_, _, _, _, err = llmtest.Collect(c.Stream(t.Context(), req))
				} else {
					_, err = c.Complete(t.Context(), req)
				}
				if err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
				body := srv.Requests()[0].Body
				if got, ok := body["prompt_cache_key"]; got != tt.want || ok != (tt.want != nil) {
					t.Fatalf("stream=%v: prompt_cache_key = %v (present %v), want %v", stream, got, ok, tt.want)
				}
			}
		})
	}
}
