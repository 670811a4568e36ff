package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// anthropicCacheBody is a valid Messages request: two tools, a system
// block, and a user / assistant (thinking, tool_use) / user (tool_result)
// history, with cache_control objects substituted for the placeholders.
func anthropicCacheBody(tool0, tool1, system, user, thinking, result, inResult string) string {
	return `{"model":"m","max_tokens":4000,
 "tools":[{"name":"a","input_schema":{"type":"object"}` + tool0 + `},{"name":"b","input_schema":{"type":"object"}` + tool1 + `}],
 "system":[{"type":"text","text":"sys"` + system + `}],
 "messages":[
  {"role":"user","content":[{"type":"text","text":"go"` + user + `}]},
  {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"c2ln"` + thinking + `},{"type":"tool_use","id":"t1","name":"a","input":{}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"` + inResult + `}]` + result + `}]}]}`
}

func TestAnthropicCacheControl(t *testing.T) {
	const cc = `,"cache_control":{"type":"ephemeral"}`
	tests := []struct {
		name    string
		body    string
		want    []string // CacheBreakpoints
		wantErr string   // "" when the server must accept the request
	}{
		{"none", anthropicCacheBody("", "", "", "", "", "", ""), nil, ""},
		{"tool, system, last block", anthropicCacheBody("", cc, cc, "", "", cc, ""),
			[]string{"tools.1", "system.0", "messages.2.content.0"}, ""},
		{"four is the maximum", anthropicCacheBody("", cc, cc, cc, "", cc, ""),
			[]string{"tools.1", "system.0", "messages.0.content.0", "messages.2.content.0"}, ""},
		{"one hour ttl", anthropicCacheBody("", `,"cache_control":{"type":"ephemeral","ttl":"1h"}`, "", "", "", "", ""),
			[]string{"tools.1"}, ""},
		{"five are rejected", anthropicCacheBody(cc, cc, cc, cc, "", cc, ""),
			[]string{"tools.0", "tools.1", "system.0", "messages.0.content.0", "messages.2.content.0"},
			"A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"blocks inside a tool result count", anthropicCacheBody(cc, cc, cc, "", "", cc, cc),
			[]string{"tools.0", "tools.1", "system.0", "messages.2.content.0", "messages.2.content.0.content.0"},
			"Found 5."},
		{"not on a thinking block", anthropicCacheBody("", "", "", "", cc, "", ""),
			[]string{"messages.1.content.0"}, "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted"},
		{"not on an empty text block", strings.Replace(anthropicCacheBody("", "", "", cc, "", "", ""), `"text":"go"`, `"text":""`, 1),
			[]string{"messages.0.content.0"}, "messages.0.content.0.text: cache_control cannot be set for empty text blocks"},
		{"only ephemeral", anthropicCacheBody("", "", `,"cache_control":{"type":"persistent"}`, "", "", "", ""),
			[]string{"system.0"}, "system.0.cache_control.type"},
		{"only known ttls", anthropicCacheBody("", "", `,"cache_control":{"type":"ephemeral","ttl":"1d"}`, "", "", "", ""),
			[]string{"system.0"}, "system.0.cache_control.ttl"},
	}
	srv := StartScript(t, Anthropic, ParseScript(t, `turns: [{text: ok}, {text: ok}, {text: ok}, {text: ok}]`))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body map[string]any
			if err := json.Unmarshal([]byte(tt.body), &body); err != nil {
				t.Fatalf("test body: %v", err)
			}
			if got := CacheBreakpoints(body); !slices.Equal(got, tt.want) {
				t.Fatalf("CacheBreakpoints = %v, want %v", got, tt.want)
			}
			resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			switch {
			case tt.wantErr == "" && resp.StatusCode != http.StatusOK:
				t.Fatalf("status %d: %s, want the request accepted", resp.StatusCode, got)
			case tt.wantErr != "" && (resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), tt.wantErr) ||
				!strings.Contains(string(got), "invalid_request_error")):
				t.Fatalf("status %d: %s, want 400 invalid_request_error containing %q", resp.StatusCode, got, tt.wantErr)
			}
		})
	}
}
