package llmtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// recordingsSubdir is where the provider recordings (go-vcr v4 cassettes
// from charmbracelet/fantasy, see their README) live relative to the
// directory that holds the repository checkout.
const recordingsSubdir = "shared/fixtures/provider-recordings/charmbracelet-fantasy/providertests/testdata"

// RecordingsDir finds the recordings: $LLM_RECORDINGS_DIR, or
// ../shared/fixtures/… next to the checkout (searched upwards from the
// working directory). It skips t when they are not available.
func RecordingsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("LLM_RECORDINGS_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Skipf("recordings: %v", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		candidate := filepath.Join(filepath.Dir(d), recordingsSubdir)
		if st, err := os.Stat(candidate); err == nil && st.IsDir() {
			return candidate
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Skip("provider recordings not found; set LLM_RECORDINGS_DIR")
	return ""
}

// Interaction is one recorded request and response.
type Interaction struct {
	Request struct {
		Method string `json:"method"`
		URL    string `json:"url"`
		Body   string `json:"body"`
	} `json:"request"`
	Response struct {
		Code    int                 `json:"code"`
		Headers map[string][]string `json:"headers"`
		Body    string              `json:"body"`
	} `json:"response"`
}

// LoadCassette reads a go-vcr v4 cassette.
func LoadCassette(path string) ([]Interaction, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c struct {
		Interactions []Interaction `json:"interactions"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	return c.Interactions, nil
}

// Recording checks adapters against real provider traffic: every cassette
// under Dirs (relative to RecordingsDir) is replayed verbatim by a
// NewReplayHandler server while the adapter under test holds the same
// conversation (simple, tool, multi_tool, thinking; streaming when the file
// name says so), and the unified responses are checked against what the
// recorded bodies contain.
type Recording struct {
	Protocol Protocol
	New      func(t *testing.T, target Target) llm.Client
	Dirs     []string
	// ReasoningRaw says the provider returns replayable reasoning items
	// (Raw) in thinking scenarios.
	ReasoningRaw bool
}

// Run runs every cassette as a subtest.
func (rc Recording) Run(t *testing.T) {
	root := RecordingsDir(t)
	var files []string
	for _, d := range rc.Dirs {
		matches, _ := filepath.Glob(filepath.Join(root, d, "*.yaml"))
		files = append(files, matches...)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatalf("no cassettes under %v", rc.Dirs)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		t.Run(rel, func(t *testing.T) { rc.one(t, f) })
	}
}

func (rc Recording) one(t *testing.T, file string) {
	inters, err := LoadCassette(file)
	if err != nil {
		t.Fatal(err)
	}
	var canned []Canned
	for _, in := range inters {
		ct := "application/json"
		for k, v := range in.Response.Headers {
			if strings.EqualFold(k, "Content-Type") && len(v) > 0 {
				ct = v[0]
			}
		}
		canned = append(canned, Canned{Status: in.Response.Code, ContentType: ct, Body: in.Response.Body})
	}
	srv := Start(t, NewReplayHandler(rc.Protocol, canned...))
	c := rc.New(t, Target{BaseURL: srv.BaseURL(), APIKey: "replay-key", Model: recordedModel(inters[0])})
	name := filepath.Base(file)
	stream := strings.Contains(name, "streaming")
	scenario := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".yaml"), "_streaming"), "-streaming")

	req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleSystem, "You are a helpful assistant"),
		llm.TextMessage(llm.RoleUser, "What's the weather in Florence, Italy?")}, Tools: []llm.ToolDefinition{Weather}}
	if scenario == "thinking" {
		req.ReasoningEffort = "high"
	}
	resp, err := call(t.Context(), c, stream, req)
	if err != nil {
		t.Fatalf("first response: %v", err)
	}
	if resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens <= 0 {
		t.Fatalf("usage not mapped: %+v", resp.Usage)
	}
	switch scenario {
	case "simple":
		if strings.TrimSpace(resp.Text()) == "" || resp.FinishReason != llm.FinishStop {
			t.Fatalf("text %q finish %q", resp.Text(), resp.FinishReason)
		}
		return
	case "tool", "thinking":
		calls := resp.ToolCalls()
		if len(calls) == 0 || calls[0].Name != "weather" || !strings.Contains(strings.ToLower(string(calls[0].Arguments)), "florence") {
			t.Fatalf("calls = %+v", calls)
		}
		if scenario == "thinking" && rc.ReasoningRaw {
			found := false
			for _, p := range resp.Message.Content {
				found = found || (p.Kind == llm.PartReasoning && len(p.Raw) > 0)
			}
			if !found {
				t.Fatalf("no replayable reasoning part in %+v", resp.Message.Content)
			}
		}
	case "multi_tool":
		names := map[string]bool{}
		for _, tc := range resp.ToolCalls() {
			names[tc.Name] = true
			if !json.Valid(tc.Arguments) {
				t.Fatalf("arguments %s are not JSON", tc.Arguments)
			}
		}
		if len(resp.ToolCalls()) < 2 || !names["add"] || !names["multiply"] {
			t.Fatalf("want add and multiply in one turn, got %+v", resp.ToolCalls())
		}
	default:
		t.Fatalf("unknown scenario %q", scenario)
	}
	if resp.FinishReason != llm.FinishToolCalls {
		t.Fatalf("finish %q, want tool_calls", resp.FinishReason)
	}
	if len(inters) < 2 {
		return
	}
	results := llm.Message{Role: llm.RoleTool}
	for _, tc := range resp.ToolCalls() {
		results.Content = append(results.Content, llm.ContentPart{Kind: llm.PartToolResult,
			ToolResult: &llm.ToolResult{CallID: tc.ID, Name: tc.Name, Content: "40 C"}})
	}
	req.Messages = append(req.Messages, resp.Message, results)
	final, err := call(t.Context(), c, stream, req)
	if err != nil {
		t.Fatalf("second response: %v", err)
	}
	if strings.TrimSpace(final.Text()) == "" || final.FinishReason != llm.FinishStop {
		t.Fatalf("final text %q finish %q", final.Text(), final.FinishReason)
	}
	if got := len(srv.Requests()); got != 2 {
		t.Fatalf("%d requests, want 2", got)
	}
}

// recordedModel reads the model from a recorded request (body or URL).
func recordedModel(in Interaction) string {
	var body struct {
		Model string `json:"model"`
	}
	if json.Unmarshal([]byte(in.Request.Body), &body) == nil && body.Model != "" {
		return body.Model
	}
	if i := strings.Index(in.Request.URL, "/models/"); i >= 0 {
		m := in.Request.URL[i+len("/models/"):]
		m, _, _ = strings.Cut(m, ":")
		return m
	}
	return "recorded-model"
}
