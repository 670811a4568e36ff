package uistream

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/loop"
)

var testRef = events.SessionRef{Namespace: "team-a", Name: "fix.the-bug", UID: "uid-1"}

// journal starts an embedded NATS server and returns a JetStream source
// over it and a function appending events to the session's journal.
func journal(t *testing.T) (JetStream, func([]loop.Event)) {
	t.Helper()
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	j, _, err := pub.OpenJournal(t.Context(), testRef, events.JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return JetStream{JS: pub.JetStream()}, func(evs []loop.Event) {
		t.Helper()
		for _, ev := range evs {
			if err := j.Append(t.Context(), ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// frames reads SSE frames ("data: ...\n\n" and comments) from r to out
// until EOF, then closes out.
func frames(r io.Reader, out chan<- string) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var frame strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			out <- frame.String()
			frame.Reset()
			continue
		}
		if frame.Len() > 0 {
			frame.WriteString("\n")
		}
		frame.WriteString(line)
	}
	if frame.Len() > 0 {
		out <- frame.String() + " (unterminated)"
	}
}

// get requests url and returns the response and a channel of its frames.
func get(t *testing.T, ctx context.Context, url string) (*http.Response, <-chan string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	ch := make(chan string, 1024)
	go frames(resp.Body, ch)
	return resp, ch
}

// collect returns every frame until the stream ends.
func collect(t *testing.T, ch <-chan string) []string {
	t.Helper()
	var out []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, f)
		case <-timeout:
			t.Fatalf("stream not ended; %d frames so far", len(out))
		}
	}
}

// wantFrames is the SSE body of evs: one frame per chunk, then [DONE].
func wantFrames(t *testing.T, evs []loop.Event) []string {
	t.Helper()
	c := NewConverter(testRef.UID)
	var cs []Chunk
	for _, ev := range evs {
		cs = append(cs, c.Event(ev)...)
	}
	var out []string
	for _, s := range marshalAll(t, append(cs, c.Finish()...)) {
		out = append(out, "data: "+s)
	}
	return append(out, "data: [DONE]")
}

// A finished journal is served as the AI SDK's UI message stream: its
// headers, one "data: <chunk>" frame per chunk, then "data: [DONE]".
func TestStreamServesTheJournal(t *testing.T) {
	src, publish := journal(t)
	recorded := recordSession(t)
	publish(recorded)
	evs, err := src.Replay(t.Context(), testRef)
	if err != nil || len(evs) != len(recorded) {
		t.Fatalf("Replay: %d events (%v), want %d", len(evs), err, len(recorded))
	}
	srv := httptest.NewServer(Stream{Source: src, Session: testRef})
	defer srv.Close()
	resp, ch := get(t, t.Context(), srv.URL)
	got := collect(t, ch)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", HeaderName: HeaderValue} {
		if resp.Header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, resp.Header.Get(k), v)
		}
	}
	if want := wantFrames(t, evs); !slices.Equal(got, want) {
		t.Errorf("got %d frames, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	var chunks []Chunk
	for _, f := range got[:len(got)-1] {
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &m); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		chunks = append(chunks, Chunk{Type: m["type"].(string)})
	}
	if chunks[0].Type != TypeStart || chunks[len(chunks)-1].Type != TypeFinish {
		t.Errorf("stream runs from %s to %s", chunks[0].Type, chunks[len(chunks)-1].Type)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A client following live from before the first event and a client
// joining after the session closed get the same stream, byte for byte,
// which is also what a replay of the finished journal gives: the live
// stream ends with [DONE] when the loop closes.
func TestLateJoinerGetsTheSameStream(t *testing.T) {
	src, publish := journal(t)
	recorded := recordSession(t)
	if last := recorded[len(recorded)-1]; last.Kind != loop.EventSessionEnd || last.Data.State != string(loop.StateClosed) {
		t.Fatalf("the recording ends with %s %s, not the loop's close", last.Kind, last.Data.State)
	}
	srv := httptest.NewServer(Stream{Source: src, Session: testRef, Live: true, KeepAlive: -1})
	defer srv.Close()

	_, early := get(t, t.Context(), srv.URL)
	half := len(recorded) / 2
	publish(recorded[:half])
	// Wait until the early client has seen the chunks of the first half.
	c := NewConverter(testRef.UID)
	n := 0
	for _, ev := range recorded[:half] {
		n += len(c.Event(ev))
	}
	var earlyFrames []string
	for len(earlyFrames) < n {
		select {
		case f, ok := <-early:
			if !ok {
				t.Fatalf("live stream ended after %d frames", len(earlyFrames))
			}
			earlyFrames = append(earlyFrames, f)
		case <-time.After(30 * time.Second):
			t.Fatalf("live client got %d of %d frames", len(earlyFrames), n)
		}
	}
	_, middle := get(t, t.Context(), srv.URL) // joins mid-session
	publish(recorded[half:])
	earlyFrames = append(earlyFrames, collect(t, early)...)
	middleFrames := collect(t, middle)
	_, late := get(t, t.Context(), srv.URL)
	lateFrames := collect(t, late)

	evs, err := src.Replay(t.Context(), testRef)
	if err != nil {
		t.Fatal(err)
	}
	want := wantFrames(t, evs)
	for name, got := range map[string][]string{"early": earlyFrames, "middle": middleFrames, "late": lateFrames} {
		if !slices.Equal(got, want) {
			t.Errorf("%s client: %d frames, want %d; first difference at %d", name, len(got), len(want), firstDiff(got, want))
		}
	}
}

func TestStreamRefusals(t *testing.T) {
	src, _ := journal(t)
	tests := []struct {
		name   string
		method string
		ref    events.SessionRef
		want   int
	}{
		{"post", http.MethodPost, testRef, http.StatusMethodNotAllowed},
		{"invalid session", http.MethodGet, events.SessionRef{Namespace: "team-a", Name: "a.>"}, http.StatusBadGateway},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Stream{Source: src, Session: tt.ref}.ServeHTTP(rec, httptest.NewRequest(tt.method, "/", nil))
			if rec.Code != tt.want {
				t.Errorf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
		})
	}
}

// An idle live stream carries keep-alive comments, which SSE readers skip.
func TestLiveStreamKeepsAlive(t *testing.T) {
	src, _ := journal(t)
	srv := httptest.NewServer(Stream{Source: src, Session: testRef, Live: true, KeepAlive: 5 * time.Millisecond})
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, ch := get(t, ctx, srv.URL)
	select {
	case f := <-ch:
		if f != ": keep-alive" {
			t.Errorf("first frame %q, want a keep-alive comment", f)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no keep-alive")
	}
}

// The adversary's pass: a hostile model and workload choose tool arguments
// and output. Frame breaks, a forged [DONE], terminal escapes, U+2028 and a
// 2 MiB output stay inside their chunk's JSON: every frame is one "data:"
// line of valid JSON, the only [DONE] is the last frame, and the output
// arrives whole.
func TestHostileToolBytesStayInsideTheirChunk(t *testing.T) {
	src, publish := journal(t)
	hostile := "x\n\ndata: [DONE]\n\nevent: error\r\n\x1b[2J\x1b]0;owned\x07\u2028\u2029\x00"
	output := hostile + strings.Repeat("y", 2<<20)
	args, err := json.Marshal(map[string]string{"command": hostile})
	if err != nil {
		t.Fatal(err)
	}
	evs := []loop.Event{
		e(loop.EventSessionStart, loop.EventData{State: "IDLE"}),
		e(loop.EventToolCallStart, loop.EventData{ToolName: "shell", CallID: "c1", Arguments: args}),
		e(loop.EventToolCallEnd, loop.EventData{ToolName: "shell", CallID: "c1", Output: output}),
		e(loop.EventSessionEnd, loop.EventData{State: "IDLE"}),
	}
	for i := range evs {
		evs[i].Seq, evs[i].SessionID, evs[i].Time = uint64(i+1), testRef.UID, time.Now()
	}
	publish(evs)
	srv := httptest.NewServer(Stream{Source: src, Session: testRef})
	defer srv.Close()
	_, ch := get(t, t.Context(), srv.URL)
	got := collect(t, ch)
	if len(got) == 0 || got[len(got)-1] != "data: [DONE]" {
		t.Fatalf("the stream does not end with its own [DONE]: %d frames", len(got))
	}
	var outputs []string
	for i, f := range got[:len(got)-1] {
		if strings.Contains(f, "\n") || !strings.HasPrefix(f, "data: {") {
			t.Fatalf("frame %d is not one data line of JSON: %.120q", i, f)
		}
		var c struct {
			Type   string          `json:"type"`
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &c); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if c.Type == TypeToolOutputAvailable {
			var s string
			if err := json.Unmarshal(c.Output, &s); err != nil {
				t.Fatalf("tool output is not a JSON string: %v", err)
			}
			outputs = append(outputs, s)
		}
	}
	if len(outputs) != 1 || outputs[0] != output {
		t.Errorf("got %d tool outputs; the hostile output arrived whole: %v", len(outputs), len(outputs) == 1 && outputs[0] == output)
	}
}
