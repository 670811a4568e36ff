package uistream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// The AI SDK's own reader (package ai, run with node) accepts every chunk
// of a recorded session's stream, served by Stream from a real embedded
// NATS server, and rebuilds the message: the answers as text parts (the cut
// attempt too, marked by a data-text-discarded part), every tool call as a
// dynamic-tool part in its final state, the plan. It needs node and a
// directory with ai@6 in node_modules: UISTREAM_AI_SDK, or else the console
// frontend's web/console (after `make ui`); without them it is skipped.
func TestAISDKReaderRebuildsTheSession(t *testing.T) {
	dir, why := aiSDKDir()
	if dir == "" {
		t.Skip(why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the AI SDK reader test needs Node.js")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "read.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// node resolves "ai" from the script's directory upwards: run a copy
	// placed in dir.
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "uistream-read-test-*.mjs")
	if err != nil {
		t.Fatal(err)
	}
	copyPath := f.Name()
	t.Cleanup(func() { _ = os.Remove(copyPath) })
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	src, publish := journal(t)
	evs := recordSession(t)
	publish(evs)
	rec := httptest.NewRecorder()
	Stream{Source: src, Session: testRef}.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))

	cmd := exec.CommandContext(t.Context(), node, copyPath)
	cmd.Stdin = bytes.NewReader(rec.Body.Bytes())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the AI SDK reader failed: %v\n%s", err, stderr.String())
	}
	var res struct {
		Chunks  int
		Message struct {
			ID    string
			Parts []struct {
				Type, Text, State, ToolName, ToolCallID, ID string
				Output                                      json.RawMessage
				ErrorText                                   string
				Data                                        json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("reader output %s: %v", out, err)
	}
	if want := strings.Count(rec.Body.String(), "data: ") - 1; res.Chunks != want {
		t.Errorf("the reader accepted %d chunks, want %d", res.Chunks, want)
	}
	if res.Message.ID != testRef.UID {
		t.Errorf("message id %q", res.Message.ID)
	}
	discarded := map[string]bool{}
	texts, tools := []string{}, map[string]string{}
	for _, p := range res.Message.Parts {
		switch p.Type {
		case "text":
			if p.State != "done" {
				t.Errorf("text part %q is %s", p.Text, p.State)
			}
			texts = append(texts, p.Text)
		case "dynamic-tool":
			tools[p.ToolCallID] = p.State
		case DataTextDiscarded:
			discarded[p.ID] = true
		}
	}
	var answers []string
	for _, ev := range evs {
		switch ev.Kind {
		case loop.EventAssistantTextEnd:
			if ev.Data.Text != "" {
				answers = append(answers, ev.Data.Text)
			}
		case loop.EventToolCallEnd:
			want := "output-available"
			if ev.Data.IsError {
				want = "output-error"
			}
			if tools[ev.Data.CallID] != want {
				t.Errorf("tool call %s (%s) is %q, want %s", ev.Data.CallID, ev.Data.ToolName, tools[ev.Data.CallID], want)
			}
		}
	}
	// One text part per answer plus one per discarded attempt.
	if len(texts) != len(answers)+len(discarded) || len(discarded) == 0 {
		t.Errorf("%d text parts (%d discarded), %d answers: %q", len(texts), len(discarded), len(answers), texts)
	}
}

// consoleDir is the console frontend, whose node_modules has ai@6 after
// `make ui`.
var consoleDir = filepath.Join("..", "..", "web", "console")

// aiSDKDir returns the directory whose node_modules has ai@6 to run the
// reader from: UISTREAM_AI_SDK, or else consoleDir; or "" and why not.
func aiSDKDir() (string, string) {
	dir, from := os.Getenv("UISTREAM_AI_SDK"), "UISTREAM_AI_SDK"
	if dir == "" {
		dir, from = consoleDir, "web/console (UISTREAM_AI_SDK is not set)"
	}
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "ai", "package.json"))
	if err != nil {
		return "", fmt.Sprintf("no AI SDK in %s: %v; run `make ui` or set UISTREAM_AI_SDK to a directory with ai@6 in node_modules", from, err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil || !strings.HasPrefix(pkg.Version, "6.") {
		return "", fmt.Sprintf("the AI SDK in %s is not ai@6 (version %q): the stream is AI SDK v6's", from, pkg.Version)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Sprintf("resolve %s: %v", dir, err)
	}
	return abs, ""
}
