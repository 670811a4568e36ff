package agentsession

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// TestWebSearchThroughTheProvider: spec.tools.webSearch puts the provider's
// own search tool, with its options, on the session's model requests (here
// Anthropic's web_search_20250305 against its wire-protocol server); the
// scripted search comes back in Anthropic's blocks and its queries, results
// and citations reach the journal on ASSISTANT_TEXT_END.
func TestWebSearchThroughTheProvider(t *testing.T) {
	ns := newNamespace(t)
	srv := llmtest.StartScript(t, llmtest.Anthropic, llmtest.ParseScript(t, `
turns:
  - expect: {webSearch: {maxUses: 2, allowedDomains: [go.dev]}}
    webSearch:
      query: "go 1.26 release"
      results: [{url: "https://go.dev/blog/go1.26", title: "Go 1.26 is released"}]
      citations: [{url: "https://go.dev/blog/go1.26", title: "Go 1.26 is released", citedText: "Go 1.26 was released in February 2026."}]
    text: "Go 1.26 was released in February 2026."
`))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns, Labels: map[string]string{runner.LabelLLMCredentials: "true"}},
		StringData: map[string]string{"anthropic": "sk-ant-websearch"}}
	if err := testClient.Create(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	s := validSession(ns)
	s.Spec.Prompt = "When was Go 1.26 released?"
	s.Spec.Model.BaseURL = srv.BaseURL()
	s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, MaxUses: ptr.To[int32](2), AllowedDomains: []string{"go.dev"}}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	markPodReady(t, getPod(t, s))
	got := waitPhase(t, s, agentsv1.PhaseSucceeded, nil)
	if got.Status.Result != "Go 1.26 was released in February 2026." {
		t.Errorf("result %q", got.Status.Result)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	var tool map[string]any
	for _, x := range reqs[0].Body["tools"].([]any) {
		if m := x.(map[string]any); m["type"] == "web_search_20250305" {
			tool = m
		}
	}
	if b, _ := json.Marshal(tool); tool == nil || tool["max_uses"] != float64(2) || fmt.Sprint(tool["allowed_domains"]) != "[go.dev]" {
		t.Errorf("web search tool = %s", b)
	}
	evs, err := events.Replay(t.Context(), testJS.JetStream(), events.SessionRef{Namespace: ns, Name: s.Name, UID: string(got.UID)})
	if err != nil {
		t.Fatalf("replay journal: %v", err)
	}
	var end *loop.Event
	for i := range evs {
		if evs[i].Kind == loop.EventAssistantTextEnd {
			end = &evs[i]
		}
	}
	if end == nil {
		t.Fatal("no ASSISTANT_TEXT_END in the journal")
	}
	want := llm.Citation{URL: "https://go.dev/blog/go1.26", Title: "Go 1.26 is released", CitedText: "Go 1.26 was released in February 2026."}
	if ws := end.Data.WebSearches; len(ws) != 1 || !slices.Equal(ws[0].Queries, []string{"go 1.26 release"}) || len(ws[0].Results) != 1 {
		t.Errorf("webSearches = %+v", ws)
	}
	if !slices.Equal(end.Data.Citations, []llm.Citation{want}) {
		t.Errorf("citations = %+v, want %+v", end.Data.Citations, want)
	}
}

// Each provider's own web search options are accepted.
func TestAPIServerAcceptsWebSearch(t *testing.T) {
	cases := map[agentsv1.Provider]agentsv1.WebSearchSpec{
		agentsv1.ProviderAnthropic: {Enabled: true, MaxUses: ptr.To[int32](5), BlockedDomains: []string{"example.com"}},
		agentsv1.ProviderOpenAI:    {Enabled: true, AllowedDomains: []string{"go.dev", "pkg.go.dev/net"}},
		agentsv1.ProviderGemini:    {Enabled: true},
	}
	for provider, ws := range cases {
		t.Run(string(provider), func(t *testing.T) {
			s := validSession("default")
			s.Spec.Model.Provider = provider
			s.Spec.Tools.WebSearch = &ws
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = testClient.Delete(t.Context(), s) })
		})
	}
}
