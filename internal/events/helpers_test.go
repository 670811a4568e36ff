package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// testEnv is a real embedded server with the stream created.
type testEnv struct {
	srv *Embedded
	nc  *nats.Conn
	pub *Publisher
	js  jetstream.JetStream
}

func newTestEnv(t testing.TB, eo EmbeddedOptions, po PublisherOptions) *testEnv {
	t.Helper()
	ctx := context.Background()
	eo.StoreDir = t.TempDir()
	srv, err := StartEmbedded(ctx, eo)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	pub, err := NewPublisher(nc, po)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	if err := pub.EnsureStream(ctx); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	return &testEnv{srv: srv, nc: nc, pub: pub, js: pub.JetStream()}
}

var testSession = SessionRef{Namespace: "team-a", Name: "fix.the-bug", UID: "2b0c3a3e-uid-1"}

// scriptedEvents returns n events of a plausible session, seq 1..n.
func scriptedEvents(uid string, n int) []loop.Event {
	t0 := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	var out []loop.Event
	for i := 1; i <= n; i++ {
		ev := loop.Event{Time: t0.Add(time.Duration(i) * time.Millisecond), SessionID: uid, Seq: uint64(i)}
		switch i % 6 {
		case 1:
			ev.Kind, ev.Data = loop.EventUserInput, loop.EventData{Content: fmt.Sprintf("do task %d", i)}
		case 2:
			ev.Kind, ev.Data = loop.EventAssistantTextDelta, loop.EventData{Delta: "thinking…"}
		case 3:
			ev.Kind = loop.EventAssistantTextEnd
			ev.Data = loop.EventData{
				Text:  "I will run the tests",
				Usage: &llm.Usage{InputTokens: 100, OutputTokens: 20},
				Assistant: &llm.Message{Role: llm.RoleAssistant, Content: []llm.ContentPart{
					{Kind: llm.PartReasoning, Text: "plan", Provider: "anthropic", Raw: json.RawMessage(`{"type":"thinking","signature":"c2ln"}`)},
					{Kind: llm.PartText, Text: "I will run the tests"},
					{Kind: llm.PartToolCall, ToolCall: &llm.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: "shell", Arguments: json.RawMessage(`{"command":"go test ./..."}`)}},
				}},
			}
		case 4:
			ev.Kind, ev.Data = loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: fmt.Sprintf("call_%d", i-1), Arguments: json.RawMessage(`{"command":"go test ./..."}`)}
		case 5:
			ev.Kind, ev.Data = loop.EventToolCallOutputDelta, loop.EventData{CallID: fmt.Sprintf("call_%d", i-2), Delta: "ok  \tpkg\t0.1s\n"}
		default:
			ev.Kind, ev.Data = loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: fmt.Sprintf("call_%d", i-3), Output: strings.Repeat("line\n", 3), DurationMs: 12}
		}
		out = append(out, ev)
	}
	return out
}

// appendAll appends evs and syncs.
func appendAll(t testing.TB, ctx context.Context, j *Journal, evs []loop.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := j.Append(ctx, ev); err != nil {
			t.Fatalf("Append seq %d: %v", ev.Seq, err)
		}
	}
	if err := j.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// rawMessages returns the body of every message stored under the prefix.
func rawMessages(t testing.TB, ctx context.Context, js jetstream.JetStream, cfg StreamConfig) []*jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m)
	}
	return out
}

// onlyLargeObject returns the large-event bucket and the name of the one
// object it must hold.
func onlyLargeObject(t *testing.T, env *testEnv) (jetstream.ObjectStore, string) {
	t.Helper()
	obs, err := env.js.ObjectStore(t.Context(), DefaultLargeBucket)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(t.Context())
	if err != nil || len(infos) != 1 {
		t.Fatalf("the large-event bucket holds %d objects (%v), want 1", len(infos), err)
	}
	return obs, infos[0].Name
}
