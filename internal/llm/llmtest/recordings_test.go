package llmtest

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestFakesAcceptRecordedRequests sends every recorded request (histories
// the real APIs accepted: tool results, echoed thinking blocks, encrypted
// reasoning, thought signatures) to the fake server of its protocol, which
// must accept it too: the fakes are no stricter than the real providers.
func TestFakesAcceptRecordedRequests(t *testing.T) {
	root := RecordingsDir(t)
	dirs := map[Protocol][]string{
		Anthropic:       {"TestAnthropic*/*"},
		OpenAIResponses: {"TestOpenAIResponses*/*"},
		ChatCompletions: {"TestOpenAICommon/*", "TestOpenAICompatible*/*"},
		Gemini:          {"TestGoogle*/*"},
	}
	script := ParseScript(t, `turns: [{text: one}, {text: two}, {text: three}]`)
	n := 0
	for proto, patterns := range dirs {
		srv := StartScript(t, proto, script)
		for _, p := range patterns {
			files, _ := filepath.Glob(filepath.Join(root, p, "*.yaml"))
			for _, f := range files {
				inters, err := LoadCassette(f)
				if err != nil {
					t.Fatal(err)
				}
				for i, in := range inters {
					u, err := url.Parse(in.Request.URL)
					if err != nil {
						t.Fatal(err)
					}
					path := u.Path
					if proto == Gemini {
						path = "/v1beta" + path[strings.Index(path, "/models/"):]
					}
					resp, err := http.Post(srv.URL+path+"?"+u.RawQuery, "application/json", bytes.NewReader([]byte(in.Request.Body)))
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						rel, _ := filepath.Rel(root, f)
						t.Errorf("%s interaction %d: fake answered %d: %s", rel, i, resp.StatusCode, body)
					}
					n++
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d recorded requests checked", n)
	}
}
