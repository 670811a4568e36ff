package llmtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// WebSearchQuery, WebSearchResults and WebSearchCitation are the search the
// suite's web search conversation scripts.
const WebSearchQuery = "go 1.26 release date"

// WebSearchResults are the pages of the scripted search.
var WebSearchResults = []llm.WebSearchResult{
	{URL: "https://go.dev/doc/go1.26", Title: "Go 1.26 Release Notes"},
	{URL: "https://go.dev/blog/go1.26", Title: "Go 1.26 is released"},
}

// WebSearchCitation is the citation on the scripted answer.
var WebSearchCitation = llm.Citation{URL: "https://go.dev/blog/go1.26", Title: "Go 1.26 is released",
	CitedText: "Go 1.26 was released in February 2026."}

// webSearchScript answers with a search and a cited text, then (after a
// follow-up question) checks that the search was sent back when the
// protocol requires it.
func webSearchScript(replayed bool) string {
	second := `  - expect: {lastUserContains: "thanks"}
    text: "You are welcome."
`
	if replayed {
		second = `  - expect: {lastUserContains: "thanks", historyWebSearch: "` + WebSearchQuery + `"}
    text: "You are welcome."
`
	}
	return `
turns:
  - webSearch:
      query: "` + WebSearchQuery + `"
      results:
        - {url: "https://go.dev/doc/go1.26", title: "Go 1.26 Release Notes"}
        - {url: "https://go.dev/blog/go1.26", title: "Go 1.26 is released"}
      citations:
        - {url: "https://go.dev/blog/go1.26", title: "Go 1.26 is released", citedText: "Go 1.26 was released in February 2026."}
    text: "Go 1.26 was released in February 2026. It adds new features."
` + second
}

// webSearch runs the web search conversation: the request offers the
// provider's search tool with s.WebSearch, the answer carries the search
// (query, results) and the citation, and the next request sends the
// search back. CheckWebSearch sees both recorded requests.
func (s Suite) webSearch(t *testing.T, stream bool) {
	if s.WebSearch == nil {
		_, c := s.start(t, webSearchScript(false))
		req := userReq("When was Go 1.26 released?")
		req.WebSearch = &llm.WebSearch{}
		_, err := call(t.Context(), c, stream, req)
		wantKind(t, err, llm.KindInvalidRequest)
		return
	}
	srv, c := s.start(t, webSearchScript(s.Protocol != Gemini))
	req := userReq("When was Go 1.26 released?")
	req.WebSearch = s.WebSearch
	var resp *llm.Response
	var err error
	var streamed []llm.WebSearchCall
	if stream {
		var text strings.Builder
		for ev, e := range c.Stream(t.Context(), req) {
			if e != nil {
				err = e
				break
			}
			switch ev.Type {
			case llm.EventTextDelta:
				text.WriteString(ev.Delta)
			case llm.EventWebSearch:
				streamed = append(streamed, *ev.WebSearch)
			case llm.EventFinish:
				resp = ev.Response
			}
		}
		if err == nil && (resp == nil || text.String() != resp.Text()) {
			t.Fatalf("streamed text %q, final response %+v", text.String(), resp)
		}
	} else {
		resp, err = c.Complete(t.Context(), req)
	}
	if err != nil {
		t.Fatal(err)
	}
	searches := resp.WebSearches()
	if len(searches) != 1 || !slices.Equal(searches[0].Queries, []string{WebSearchQuery}) {
		t.Fatalf("web searches = %+v, want one for %q", searches, WebSearchQuery)
	}
	wantResults := slices.Clone(WebSearchResults)
	if s.Protocol == OpenAIResponses {
		for i := range wantResults {
			wantResults[i].Title = "" // web_search_call sources carry URLs only
		}
	}
	if !slices.Equal(searches[0].Results, wantResults) {
		t.Fatalf("web search results = %+v, want %+v", searches[0].Results, wantResults)
	}
	if got := resp.Message.Citations(); !slices.Equal(got, []llm.Citation{WebSearchCitation}) {
		t.Fatalf("citations = %+v, want %+v", got, WebSearchCitation)
	}
	if resp.Text() != "Go 1.26 was released in February 2026. It adds new features." || resp.FinishReason != llm.FinishStop {
		t.Fatalf("text %q finish %q", resp.Text(), resp.FinishReason)
	}
	if stream {
		var queries []string
		var results []llm.WebSearchResult
		for _, ws := range streamed {
			queries = append(queries, ws.Queries...)
			results = append(results, ws.Results...)
		}
		if !slices.Contains(queries, WebSearchQuery) || (s.Protocol != Gemini && len(results) != len(WebSearchResults)) {
			t.Fatalf("streamed web search events %+v, want the query and its results", streamed)
		}
	}
	req.Messages = append(req.Messages, resp.Message, llm.TextMessage(llm.RoleUser, "thanks"))
	final, err := call(t.Context(), c, stream, req)
	if err != nil {
		t.Fatal(err)
	}
	if final.Text() != "You are welcome." {
		t.Fatalf("final text %q", final.Text())
	}
	reqs := srv.Requests()
	if s.CheckWebSearch != nil {
		s.CheckWebSearch(t, reqs)
	}
}
