package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	"github.com/agent-operator/agent-operator/internal/llm/provider"
)

// TestServesEveryProtocolThroughTheRealAdapters starts the mux for a
// directory of scripts and talks to each protocol through provider.New.
func TestServesEveryProtocolThroughTheRealAdapters(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.yaml"), []byte(`turns: [{text: "hello from the script"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	mux, routes, err := buildMux(dir, "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 4 {
		t.Fatalf("routes = %v", routes)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	names := map[llmtest.Protocol]string{llmtest.Anthropic: provider.Anthropic, llmtest.OpenAIResponses: provider.OpenAI,
		llmtest.ChatCompletions: provider.OpenAICompatible, llmtest.Gemini: provider.Gemini}
	for _, p := range llmtest.Protocols {
		t.Run(string(p), func(t *testing.T) {
			c, err := provider.New(provider.Config{Provider: names[p], Model: "m", BaseURL: llmtest.BaseURL(p, srv.URL+"/hello/"+string(p))})
			if err != nil {
				t.Fatal(err)
			}
			for _, stream := range []bool{false, true} {
				req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
				var resp *llm.Response
				if stream {
					resp, _, _, _, err = llmtest.Collect(c.Stream(t.Context(), req))
				} else {
					resp, err = c.Complete(t.Context(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				if resp.Text() != "hello from the script" {
					t.Fatalf("text %q", resp.Text())
				}
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"no script":        {},
		"unknown protocol": {"--script", "x.yaml", "--protocol", "bedrock"},
		"missing script":   {"--script", filepath.Join(t.TempDir(), "absent.yaml")},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(args); err == nil {
				t.Fatal("expected an error")
			}
		})
	}
}

func TestBundledScriptsParse(t *testing.T) {
	if _, err := loadScripts("scripts"); err != nil {
		t.Fatal(err)
	}
}
