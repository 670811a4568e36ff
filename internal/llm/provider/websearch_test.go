package provider_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// TestWebSearchSession drives a loop Session with WithWebSearch through each
// real adapter against its wire-protocol server: the provider's scripted
// search (in its own tool shape) reaches ASSISTANT_TEXT_END as WebSearches
// and Citations, and the next input's request sends the search back where
// the provider requires it (Anthropic, OpenAI Responses).
func TestWebSearchSession(t *testing.T) {
	cite := llm.Citation{URL: "https://go.dev/blog/go1.26", Title: "Go 1.26 is released", CitedText: "Go 1.26 was released in February 2026."}
	for _, pv := range looptest.Providers {
		t.Run(pv.Name, func(t *testing.T) {
			opts := map[string]*llm.WebSearch{
				"anthropic": {MaxUses: 2, BlockedDomains: []string{"example.com"}},
				"openai":    {AllowedDomains: []string{"go.dev"}},
				"gemini":    {},
			}[pv.Name]
			second := scripted.Turn{Expect: &scripted.Expect{LastUserContains: "thanks"}, Text: "You are welcome."}
			if pv.Name != "gemini" {
				second.Expect.HistoryWebSearch = "go 1.26 release"
			}
			script := looptest.Script(scripted.Turn{
				Expect: &scripted.Expect{WebSearch: opts},
				WebSearch: &scripted.WebSearch{Query: "go 1.26 release",
					Results:   []llm.WebSearchResult{{URL: "https://go.dev/blog/go1.26", Title: "Go 1.26 is released"}},
					Citations: []llm.Citation{cite}},
				Text: "Go 1.26 was released in February 2026.",
			}, second)
			env, _ := looptest.NewEnv(t)
			s := looptest.NewSession(t, adapterClient, pv.New(), env, script, loop.WithWebSearch(opts))
			rec := looptest.Record(s)
			if err := s.Submit(t.Context(), "When was Go 1.26 released?"); err != nil {
				t.Fatal(err)
			}
			if err := s.Submit(t.Context(), "thanks"); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			ends := looptest.OfKind(rec.All(t), loop.EventAssistantTextEnd)
			if len(ends) != 2 {
				t.Fatalf("%d ASSISTANT_TEXT_END events, want 2", len(ends))
			}
			d := ends[0].Data
			if len(d.WebSearches) != 1 || !slices.Equal(d.WebSearches[0].Queries, []string{"go 1.26 release"}) ||
				len(d.WebSearches[0].Results) != 1 || d.WebSearches[0].Results[0].URL != cite.URL {
				t.Fatalf("webSearches = %+v", d.WebSearches)
			}
			if !slices.Equal(d.Citations, []llm.Citation{cite}) {
				t.Fatalf("citations = %+v, want %+v", d.Citations, cite)
			}
			// The event as published (JSON) keeps them.
			b, err := json.Marshal(ends[0])
			if err != nil {
				t.Fatal(err)
			}
			var back loop.Event
			if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.Data.Citations, d.Citations) || len(back.Data.Assistant.WebSearches()) != 1 {
				t.Fatalf("event round trip: %v %s", err, b)
			}
			if len(ends[1].Data.WebSearches) != 0 || ends[1].Data.Text != "You are welcome." {
				t.Fatalf("second answer = %+v", ends[1].Data)
			}
		})
	}
}
