package events

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// deltaSession builds the events of one session holding many delta
// streams, seq 1..n.
type deltaSession struct {
	evs []loop.Event
}

func (s *deltaSession) add(kind loop.EventKind, data loop.EventData) {
	seq := uint64(len(s.evs) + 1)
	s.evs = append(s.evs, loop.Event{Kind: kind, Seq: seq, SessionID: testSession.UID,
		Time: time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC).Add(time.Duration(seq) * time.Millisecond), Data: data})
}

// stream adds one stream of kind (ASSISTANT_TEXT_DELTA or
// TOOL_CALL_OUTPUT_DELTA) with the given pieces as its deltas.
func (s *deltaSession) stream(kind loop.EventKind, id string, pieces []string) {
	start, end := loop.EventAssistantTextStart, loop.EventAssistantTextEnd
	if kind == loop.EventToolCallOutputDelta {
		start, end = loop.EventToolCallStart, loop.EventToolCallEnd
	}
	s.add(start, loop.EventData{CallID: id, ToolName: "shell"})
	for _, p := range pieces {
		s.add(kind, loop.EventData{CallID: id, Delta: p})
	}
	s.add(end, loop.EventData{CallID: id, ToolName: "shell", Text: "t", Output: "o"})
}

// splits returns text cut in two at every byte position in [from, to],
// and in three at every pair of positions in [from3, to].
func splits(text string, from, from3, to int) [][]string {
	var out [][]string
	for i := from; i <= to; i++ {
		if !utf8.RuneStart(text[min(i, len(text)-1)]) {
			continue
		}
		out = append(out, []string{text[:i], text[i:]})
		for k := i; i >= from3 && k <= to; k++ {
			if !utf8.RuneStart(text[min(k, len(text)-1)]) {
				continue
			}
			out = append(out, []string{text[:i], text[i:k], text[k:]})
		}
	}
	return out
}

// publishedStreams replays the session and returns, per stream id, the
// concatenation of its deltas published before its END event.
func publishedStreams(t *testing.T, env *testEnv, kind loop.EventKind, n int) map[string]string {
	t.Helper()
	got, err := Replay(t.Context(), env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("replayed %d events, appended %d", len(got), n)
	}
	end := loop.EventAssistantTextEnd
	if kind == loop.EventToolCallOutputDelta {
		end = loop.EventToolCallEnd
	}
	text := map[string]string{}
	ended := map[string]bool{}
	for i, ev := range got {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		switch ev.Kind {
		case kind:
			if ended[ev.Data.CallID] {
				t.Errorf("stream %q: delta seq %d after its end", ev.Data.CallID, ev.Seq)
			}
			text[ev.Data.CallID] += ev.Data.Delta
		case end:
			ended[ev.Data.CallID] = true
		}
	}
	return text
}

// A secret split across deltas never appears whole in what is published,
// and text without secrets passes through byte for byte, the bytes held
// back arriving before the stream's END.
func TestJournalRedactsSecretsSplitAcrossDeltas(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	const token = "ghp_notAliteralSecret42"
	kinds := []loop.EventKind{loop.EventAssistantTextDelta, loop.EventToolCallOutputDelta}
	tests := []struct {
		name   string
		text   string
		secret string // "" when the text holds none
		// from, to: the cut positions tried; from3: of three pieces
		from, from3, to int
	}{
		{name: "known secret", text: "the key is " + secret + " ok", secret: secret,
			from: len("the key is "), from3: len("the key is "), to: len("the key is " + secret)},
		{name: "assignment", text: "export GITHUB_TOKEN=" + token + "\nnext", secret: token,
			from: len("export "), from3: len("export GITHUB_"), to: len("export GITHUB_TOKEN=" + token)},
		{name: "quoted assignment", text: `{"api_key": "` + token + `"}`, secret: token,
			from: 0, from3: len(`{"api_`), to: len(`{"api_key": "` + token)},
		{name: "no secret", text: "the data is in a photo, to pass: sk-li",
			from: 0, from3: len("the data is in a photo, "), to: len("the data is in a photo, to pass: sk-li")},
		{name: "no secret, non-ASCII", text: "Schlüssel — ключ: tokens täglich",
			from: 0, from3: len("Schlüssel — "), to: len("Schlüssel — ключ: tokens täglich")},
	}
	for _, kind := range kinds {
		for _, tt := range tests {
			t.Run(string(kind)+"/"+tt.name, func(t *testing.T) {
				ctx := t.Context()
				env, j := redactingJournal(t, secret)
				var s deltaSession
				cases := splits(tt.text, tt.from, tt.from3, tt.to)
				for i, pieces := range cases {
					s.stream(kind, fmt.Sprintf("s%d", i), pieces)
				}
				appendAll(t, ctx, j, s.evs)
				got := publishedStreams(t, env, kind, len(s.evs))
				for i, pieces := range cases {
					id := fmt.Sprintf("s%d", i)
					out := got[id]
					if tt.secret != "" {
						if strings.Contains(out, tt.secret) {
							t.Errorf("split %q: published %q holds the secret", pieces, out)
						}
						if !strings.Contains(out, Redacted) {
							t.Errorf("split %q: published %q, want it redacted", pieces, out)
						}
						continue
					}
					if out != tt.text {
						t.Errorf("split %q: published %q before END, want %q", pieces, out, tt.text)
					}
				}
			})
		}
	}
}

// Deltas of two tool calls interleaved: a secret split in one of them is
// still never whole, and plain text still passes through.
func TestJournalRedactsSecretsSplitAcrossInterleavedDeltas(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	tests := []struct {
		name, text, secret string
	}{
		{name: "known secret", text: "key " + secret + "\n", secret: secret},
		{name: "assignment", text: "GITHUB_TOKEN=ghp_notAliteralSecret42\n", secret: "ghp_notAliteralSecret42"},
		{name: "no secret", text: "the data is in a photo, to pass\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			env, j := redactingJournal(t, secret)
			var s deltaSession
			const out = loop.EventToolCallOutputDelta
			for i := 1; i < len(tt.text); i++ {
				a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
				s.add(loop.EventToolCallStart, loop.EventData{CallID: a})
				s.add(loop.EventToolCallStart, loop.EventData{CallID: b})
				s.add(out, loop.EventData{CallID: a, Delta: tt.text[:i]})
				s.add(out, loop.EventData{CallID: b, Delta: "b says to"})
				s.add(out, loop.EventData{CallID: a, Delta: tt.text[i:]})
				s.add(out, loop.EventData{CallID: b, Delta: "ken\n"})
				s.add(loop.EventToolCallEnd, loop.EventData{CallID: a})
				s.add(loop.EventToolCallEnd, loop.EventData{CallID: b})
			}
			appendAll(t, ctx, j, s.evs)
			got := publishedStreams(t, env, out, len(s.evs))
			for i := 1; i < len(tt.text); i++ {
				a, b := got[fmt.Sprintf("a%d", i)], got[fmt.Sprintf("b%d", i)]
				if b != "b says token\n" {
					t.Errorf("cut %d: other stream published %q", i, b)
				}
				if tt.secret == "" {
					if a != tt.text {
						t.Errorf("cut %d: published %q, want %q", i, a, tt.text)
					}
				} else if strings.Contains(a, tt.secret) {
					t.Errorf("cut %d: published %q holds the secret", i, a)
				}
			}
		})
	}
}

// A delta ending with the start of a secret is held until the next event,
// then published with its seq: nothing is lost at Sync.
func TestJournalSyncFlushesHeldDelta(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	j, err := env.pub.NewJournal(testSession, 0, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var s deltaSession
	s.add(loop.EventAssistantTextStart, loop.EventData{})
	s.add(loop.EventAssistantTextDelta, loop.EventData{Delta: "a photo"})
	appendAll(t, ctx, j, s.evs)
	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Data.Delta != "a photo" {
		t.Fatalf("after Sync replayed %+v, want the held delta whole", got)
	}
	if err := j.Append(ctx, loop.Event{Kind: loop.EventAssistantTextDelta, Seq: 2}); err == nil {
		t.Error("Append of an old seq succeeded")
	}
}

// redactingJournal is a journal of testSession on a fresh server whose
// redactor knows secret.
func redactingJournal(t *testing.T, secret string) (*testEnv, *Journal) {
	t.Helper()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	j, err := env.pub.NewJournal(testSession, 0, JournalOptions{Redactor: NewRedactor(secret)})
	if err != nil {
		t.Fatal(err)
	}
	return env, j
}
