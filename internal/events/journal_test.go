package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

func TestJournalRoundTrip(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	parent := &SessionRef{Namespace: "team-a", Name: "parent", UID: "uid-parent"}
	j, err := env.pub.NewJournal(testSession, 0, JournalOptions{Parent: parent, Window: 8})
	if err != nil {
		t.Fatal(err)
	}
	want := scriptedEvents(testSession.UID, 100)
	appendAll(t, ctx, j, want)

	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replayed events differ (-want +got):\n%s", diff)
	}
	if err := CheckSequence(got); err != nil {
		t.Error(err)
	}

	// Every message is an envelope on the documented subject.
	msgs := rawMessages(t, ctx, env.js, env.pub.StreamConfig())
	if len(msgs) != len(want) {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		var e Envelope
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		wantSubj := "agents.team-a.fix_the-bug." + strings.ToLower(string(want[i].Kind))
		if m.Subject != wantSubj {
			t.Errorf("message %d subject %q, want %q", i, m.Subject, wantSubj)
		}
		if e.V != 1 || e.ID != testSession.UID+"/"+itoa(want[i].Seq) || e.Session != testSession || e.Parent == nil || *e.Parent != *parent {
			t.Errorf("message %d envelope header %+v", i, e)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != e.ID {
			t.Errorf("message %d Nats-Msg-Id %q, want %q", i, got, e.ID)
		}
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestReplayEmptyAndOtherSessions(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	got, err := Replay(ctx, env.js, testSession)
	if err != nil || len(got) != 0 {
		t.Fatalf("Replay of an empty journal = %v, %v; want no events", got, err)
	}
	// An older incarnation with the same name, and another session.
	old := testSession
	old.UID = "uid-old"
	other := SessionRef{Namespace: "team-a", Name: "fix-the-bug", UID: "uid-other"}
	for _, s := range []SessionRef{old, other, testSession} {
		j, err := env.pub.NewJournal(s, 0, JournalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		appendAll(t, ctx, j, scriptedEvents(s.UID, 7))
	}
	got, err = Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(scriptedEvents(testSession.UID, 7), got); diff != "" {
		t.Errorf("Replay mixed sessions (-want +got):\n%s", diff)
	}
	// Without a uid, the newest incarnation is read.
	anon := testSession
	anon.UID = ""
	got, err = Replay(ctx, env.js, anon)
	if err != nil || len(got) != 7 || got[0].SessionID != testSession.UID {
		t.Errorf("Replay without uid: %d events, err %v", len(got), err)
	}
}

func TestJournalDedupe(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	evs := scriptedEvents(testSession.UID, 5)
	j1, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	appendAll(t, ctx, j1, evs)
	// A second writer of the same generation re-publishes the same seqs.
	j2, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	appendAll(t, ctx, j2, evs)
	if n := len(rawMessages(t, ctx, env.js, env.pub.StreamConfig())); n != len(evs) {
		t.Errorf("stream holds %d messages after re-publishing, want %d", n, len(evs))
	}
	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestJournalRejectsNonIncreasingSeq(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	j, _ := env.pub.NewJournal(testSession, 3, JournalOptions{})
	err := j.Append(t.Context(), scriptedEvents(testSession.UID, 3)[2])
	if err == nil {
		t.Fatal("Append of seq 3 after 3 succeeded")
	}
}

// A writer crashed after seq 2 was synced, with seq 3 lost and seq 4 stored.
// OpenJournal must continue after 2 in a new generation, and the successor's
// 3 and 4 must win over the orphan 4.
func TestOpenJournalAfterCrashWithOrphan(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	evs := scriptedEvents(testSession.UID, 4)
	j0, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	appendAll(t, ctx, j0, evs[:2])
	orphan, _ := env.pub.NewJournal(testSession, 3, JournalOptions{})
	stale := evs[3]
	stale.Data.Output = "output of the crashed writer"
	appendAll(t, ctx, orphan, []loop.Event{stale})

	j1, replayed, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs[:2], replayed); diff != "" {
		t.Fatalf("OpenJournal replayed (-want +got):\n%s", diff)
	}
	if j1.opts.Generation != 1 {
		t.Errorf("generation %d, want 1", j1.opts.Generation)
	}
	more := scriptedEvents(testSession.UID, 6)
	appendAll(t, ctx, j1, more[2:])
	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(more, got); diff != "" {
		t.Errorf("after resume (-want +got):\n%s", diff)
	}
	// A second resume moves to generation 2.
	j2, replayed, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil || len(replayed) != 6 || j2.opts.Generation != 2 {
		t.Errorf("second OpenJournal: %d events, generation %d, err %v", len(replayed), j2.opts.Generation, err)
	}
}

// stateRecorder collects OnStateChange calls on a channel.
type stateRecorder chan bool

func (s stateRecorder) record(available bool, _ error) {
	select {
	case s <- available:
	default:
	}
}

func TestJournalSurvivesServerRestart(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{AckTimeout: 300 * time.Millisecond})
	states := make(stateRecorder, 16)
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{OnStateChange: states.record, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	evs := scriptedEvents(testSession.UID, 60)
	appendAll(t, ctx, j, evs[:15])
	// Some publishes are still in flight when the server goes away.
	for _, ev := range evs[15:20] {
		if err := j.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	env.srv.Stop()
	for _, ev := range evs[20:40] {
		if err := j.Append(ctx, ev); err != nil {
			t.Fatalf("Append while down: %v", err)
		}
	}
	synced := make(chan error, 1)
	go func() { synced <- j.Sync(ctx) }()
	select {
	case avail := <-states:
		if avail {
			t.Fatal("first state change reports available")
		}
	case err := <-synced:
		t.Fatalf("Sync returned %v while the server is down", err)
	}
	if avail, err := j.Available(); avail || err == nil {
		t.Errorf("Available() = %v, %v while down", avail, err)
	}
	select {
	case err := <-synced:
		t.Fatalf("Sync returned %v while the server is down", err)
	default:
	}

	if err := env.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-synced; err != nil {
		t.Fatalf("Sync after restart: %v", err)
	}
	if avail := <-states; !avail {
		t.Error("no available state change after restart")
	}
	appendAll(t, ctx, j, evs[40:])

	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("after restart (-want +got):\n%s", diff)
	}
	if n := len(rawMessages(t, ctx, env.js, env.pub.StreamConfig())); n != len(evs) {
		t.Errorf("stream holds %d messages, want %d (duplicates stored)", n, len(evs))
	}
}

func TestJournalBackpressureHonoursContext(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{AckTimeout: 200 * time.Millisecond})
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{Window: 2, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	env.srv.Stop()
	evs := scriptedEvents(testSession.UID, 3)
	for _, ev := range evs[:2] {
		if err := j.Append(t.Context(), ev); err != nil {
			t.Fatalf("Append within the window: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := j.Append(ctx, evs[2])
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append with a full window while down = %v, want deadline exceeded", err)
	}
	if n := j.Pending(); n != 2 {
		t.Errorf("Pending() = %d, want 2", n)
	}
	if err := env.srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	appendAll(t, t.Context(), j, evs[2:])
	got, err := Replay(t.Context(), env.js, testSession)
	if err != nil || len(got) != 3 {
		t.Errorf("Replay: %d events, %v", len(got), err)
	}
}

func TestJournalLargeEvents(t *testing.T) {
	tests := []struct {
		name   string
		eo     EmbeddedOptions
		stream StreamConfig
		size   int
	}{
		{"over default max payload", EmbeddedOptions{}, StreamConfig{}, 3 << 20},
		{"over stream max msg size", EmbeddedOptions{}, StreamConfig{MaxMsgSize: 64 << 10}, 200 << 10},
		{"over server max payload", EmbeddedOptions{MaxPayload: 128 << 10}, StreamConfig{}, 300 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			env := newTestEnv(t, tt.eo, PublisherOptions{Stream: tt.stream})
			j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
			evs := scriptedEvents(testSession.UID, 6)
			evs[5].Data.Output = strings.Repeat("0123456789abcdef\n", tt.size/17)
			appendAll(t, ctx, j, evs)
			got, err := Replay(ctx, env.js, testSession)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(evs, got); diff != "" {
				t.Errorf("(-want +got):\n%.2000s", diff)
			}
			msgs := rawMessages(t, ctx, env.js, env.pub.StreamConfig())
			last := msgs[len(msgs)-1]
			var e Envelope
			if err := json.Unmarshal(last.Data, &e); err != nil {
				t.Fatal(err)
			}
			if e.Ref == nil || e.Data.Output != "" || len(last.Data) > 4096 {
				t.Errorf("large event stored inline (%d bytes, ref %v)", len(last.Data), e.Ref)
			}
		})
	}
}

func TestJournalRedactsSecrets(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	const secret = "sk-live-0123456789abcdef"
	const envToken = "ghp_notAliteralSecret42"
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{Redactor: NewRedactor(secret, "")})
	evs := scriptedEvents(testSession.UID, 6)
	evs[0].Data.Content = "use the key " + secret + " please"
	evs[2].Data.Text = "Your key is " + secret
	evs[2].Data.Assistant.Content[1].Text = "Your key is " + secret
	evs[2].Data.Assistant.Content[0].Raw = json.RawMessage(`{"type":"thinking","thinking":"key ` + secret + `"}`)
	evs[3].Data.Arguments = json.RawMessage(`{"command":"curl -H 'Authorization: ` + secret + `' https://x"}`)
	evs[4].Data.Delta = "GITHUB_TOKEN=" + envToken + "\n"
	evs[5].Data.Output = "env:\nOPENAI_API_KEY=" + secret + "\nGITHUB_TOKEN=" + envToken + "\n" + strings.Repeat("x", 2<<20)
	appendAll(t, ctx, j, evs)

	var blobs [][]byte
	for _, m := range rawMessages(t, ctx, env.js, env.pub.StreamConfig()) {
		blobs = append(blobs, m.Data)
	}
	obs, name := onlyLargeObject(t, env)
	data, err := obs.GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	blobs = append(blobs, data)
	for i, b := range blobs {
		for _, s := range []string{secret, envToken} {
			if strings.Contains(string(b), s) {
				t.Errorf("published message %d contains secret %q", i, s)
			}
		}
	}
	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Your key is " + Redacted; got[2].Data.Text != want || got[2].Data.Assistant.Text() != want {
		t.Errorf("assistant text %q / %q, want %q", got[2].Data.Text, got[2].Data.Assistant.Text(), want)
	}
	if !strings.HasPrefix(got[5].Data.Output, "env:\nOPENAI_API_KEY="+Redacted+"\nGITHUB_TOKEN="+Redacted+"\n") {
		t.Errorf("tool output starts %q", got[5].Data.Output[:80])
	}
	if got[2].Data.Assistant.Content[2].ToolCall.Name != "shell" || got[2].Data.Usage.InputTokens != 100 {
		t.Errorf("redaction damaged the assistant message: %+v", got[2].Data)
	}
	_ = llm.RoleAssistant
}

// The loop appends under its emitter lock from several goroutines while the
// session goroutine calls Sync: Append and Sync must be safe together, and
// Sync must cover every event appended before it was called.
func TestJournalConcurrentAppendAndSync(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{Window: 16})
	evs := scriptedEvents(testSession.UID, 600)
	var appendMu sync.Mutex // the emitter lock
	next := 0
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				appendMu.Lock()
				if next == len(evs) {
					appendMu.Unlock()
					return
				}
				err := j.Append(ctx, evs[next])
				next++
				appendMu.Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		for i := 0; i < 50; i++ {
			appendMu.Lock()
			appendedSoFar := next
			appendMu.Unlock()
			if err := j.Sync(ctx); err != nil {
				errs <- err
				return
			}
			got, err := Replay(ctx, env.js, testSession)
			if err != nil {
				errs <- err
				return
			}
			if len(got) < appendedSoFar {
				errs <- fmt.Errorf("after Sync %d events are durable, %d were appended before it", len(got), appendedSoFar)
				return
			}
		}
	}()
	wg.Wait()
	<-syncDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := j.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := Replay(ctx, env.js, testSession)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("(-want +got):\n%.3000s", diff)
	}
}
