package scripted

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

const sample = `
turns:
  - text: "Creating the file."
    toolCalls:
      - name: write_file
        arguments: {file_path: hello.py, content: "print('hi')"}
  - expect: {lastToolResultContains: "wrote"}
    text: "Done."
agents:
  - match: "write tests"
    turns:
      - text: "Tests written."
`

func conversation(first string, results ...string) *llm.Request {
	req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, first)}}
	for _, r := range results {
		req.Messages = append(req.Messages,
			llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentPart{{Kind: llm.PartText, Text: "x"}}},
			llm.Message{Role: llm.RoleTool, Content: []llm.ContentPart{{Kind: llm.PartToolResult,
				ToolResult: &llm.ToolResult{CallID: "c", Content: r}}}})
	}
	return req
}

func TestCompleteFollowsConversation(t *testing.T) {
	s, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	c := New(s, "demo")
	tests := []struct {
		name      string
		req       *llm.Request
		wantText  string
		wantCalls int
		wantErr   llm.ErrorKind
	}{
		{"first turn calls a tool", conversation("make hello.py"), "Creating the file.", 1, ""},
		{"second turn checks the result", conversation("make hello.py", "wrote 11 bytes"), "Done.", 0, ""},
		{"expectation mismatch fails loudly", conversation("make hello.py", "permission denied"), "", 0, llm.KindInvalidRequest},
		{"exhausted script fails loudly", conversation("make hello.py", "wrote", "again"), "", 0, llm.KindInvalidRequest},
		{"subagent conversation uses its own turns", conversation("please write tests for hello.py"), "Tests written.", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Complete(t.Context(), tt.req)
			if tt.wantErr != "" {
				if llm.KindOf(err) != tt.wantErr {
					t.Fatalf("error kind = %q (%v), want %q", llm.KindOf(err), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text() != tt.wantText || len(resp.ToolCalls()) != tt.wantCalls {
				t.Fatalf("got text %q with %d calls, want %q with %d", resp.Text(), len(resp.ToolCalls()), tt.wantText, tt.wantCalls)
			}
		})
	}
}

func TestStreamAssemblesTheSameResponse(t *testing.T) {
	s, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	c := New(s, "demo")
	var text strings.Builder
	var final *llm.Response
	var ended []llm.ToolCall
	for ev, err := range c.Stream(t.Context(), conversation("make hello.py")) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case llm.EventTextDelta:
			text.WriteString(ev.Delta)
		case llm.EventToolCallEnd:
			ended = append(ended, *ev.ToolCall)
		case llm.EventFinish:
			final = ev.Response
		}
	}
	if final == nil || text.String() != final.Text() || len(ended) != 1 {
		t.Fatalf("deltas %q, tool calls %d, final %+v", text.String(), len(ended), final)
	}
	var args map[string]string
	if err := json.Unmarshal(ended[0].Arguments, &args); err != nil || args["file_path"] != "hello.py" {
		t.Fatalf("arguments %s: %v", ended[0].Arguments, err)
	}
}

func TestScriptedErrorsAreTyped(t *testing.T) {
	s, err := Parse([]byte(`turns: [{error: {kind: rate_limit, statusCode: 429, retryAfterMs: 1500}}]`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(s, "m").Complete(t.Context(), conversation("hi"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindRateLimit || e.RetryAfter.Milliseconds() != 1500 || !e.Retryable() {
		t.Fatalf("got %#v", err)
	}
}

func TestParseRejectsBadScripts(t *testing.T) {
	for name, in := range map[string]string{
		"unknown field":          `turns: [{txt: hi}]`,
		"error and answer":       `turns: [{text: hi, error: {kind: server}}]`,
		"tool call without name": `turns: [{toolCalls: [{arguments: {}}]}]`,
		"agent without match":    `agents: [{turns: [{text: hi}]}]`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(in)); err == nil {
				t.Fatal("expected an error")
			}
		})
	}
}

func TestErrorTimesFailsThenAnswers(t *testing.T) {
	s, err := Parse([]byte(`turns: [{error: {kind: server, statusCode: 503, times: 2}, text: "finally"}]`))
	if err != nil {
		t.Fatal(err)
	}
	c := New(s, "m")
	for i, want := range []llm.ErrorKind{llm.KindServer, llm.KindServer, ""} {
		resp, err := c.Complete(t.Context(), conversation("hi"))
		if llm.KindOf(err) != want && !(want == "" && err == nil) {
			t.Fatalf("request %d: err %v, want kind %q", i+1, err, want)
		}
		if want == "" && resp.Text() != "finally" {
			t.Fatalf("request %d: text %q", i+1, resp.Text())
		}
	}
}

func TestMidStreamErrorComesAfterTheText(t *testing.T) {
	s, err := Parse([]byte(`turns: [{text: "partial words here", error: {kind: server, midStream: true}}]`))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var got error
	for ev, err := range New(s, "m").Stream(t.Context(), conversation("hi")) {
		if err != nil {
			got = err
			break
		}
		text.WriteString(ev.Delta)
	}
	if llm.KindOf(got) != llm.KindServer || text.String() != "partial words here" {
		t.Fatalf("text %q then %v", text.String(), got)
	}
	if _, err := New(s, "m").Complete(t.Context(), conversation("hi")); llm.KindOf(err) != llm.KindServer {
		t.Fatalf("Complete: %v", err)
	}
}

// TestParseRefusesAnAliasBomb: a script is parsed by the manager (once per
// ConfigMap revision, internal/runner/scripts.go), so a hostile script built
// of nested YAML aliases (a billion laughs in a few hundred bytes) must be
// refused by the parser, not expanded into the manager's memory.
func TestParseRefusesAnAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("turns:\n  - text: *a9\n")
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Fatalf("a script of nested aliases (10^10 strings once expanded): %v, want the parser's excessive-aliasing refusal", err)
	}
}
