package events

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// A writer whose session another writer opened afterwards (a takeover
// while it was paused or partitioned) can append nothing more: its publish
// fails with ErrFenced and it is told so, while the new writer continues
// the journal without a gap or a duplicate.
func TestStaleWriterIsFenced(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	ctx := context.Background()
	evs := scriptedEvents(testSession.UID, 12)

	var fencedA atomic.Bool
	a, _, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{OnStateChange: func(ok bool, err error) {
		if !ok && errors.Is(err, ErrFenced) {
			fencedA.Store(true)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, ctx, a, evs[:4])
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	// B takes the session over: it replays A's events and fences A out.
	b, replayed, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 4 {
		t.Fatalf("B replayed %d events, want 4", len(replayed))
	}

	// A, resumed, tries to go on: refused, and told.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Append(sctx, evs[4]); err != nil {
		t.Fatal(err) // asynchronous: the refusal comes with the ack
	}
	if err := a.Sync(sctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's Sync = %v, want ErrFenced", err)
	}
	if !fencedA.Load() {
		t.Error("A's OnStateChange was not told it was fenced")
	}

	// B continues the journal from where A's acknowledged events end.
	appendAll(t, ctx, b, evs[4:])
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	_, final, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSequence(final); err != nil || len(final) != 12 {
		t.Fatalf("journal after the takeover: %d events, %v", len(final), err)
	}
	for _, m := range rawMessages(t, ctx, env.js, env.pub.cfg) {
		if m.Subject == FenceSubject(env.pub.cfg.Prefix, testSession) {
			continue
		}
		if m.Header.Get("Nats-Msg-Id") == MsgID(testSession.UID, evs[4].Seq, 0) {
			t.Errorf("A's refused event %d is in the stream", evs[4].Seq)
		}
	}
}

// A fence message gone from the stream (past its retention) is not a
// takeover: the writer fences anew and its events are stored.
func TestExpiredFenceIsRenewed(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	ctx := context.Background()
	evs := scriptedEvents(testSession.UID, 6)
	j, _, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, ctx, j, evs[:3])
	if err := j.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	stream, err := env.js.Stream(ctx, env.pub.cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(FenceSubject(env.pub.cfg.Prefix, testSession))); err != nil {
		t.Fatal(err)
	}
	appendAll(t, ctx, j, evs[3:])
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := j.Sync(sctx); err != nil {
		t.Fatalf("Sync after the fence expired: %v", err)
	}
	_, final, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(final) != 6 {
		t.Errorf("%d events, want 6", len(final))
	}
}

// A writer that takes a session over replays every event the writer before
// it got acknowledged, even one appended while the takeover opens the
// journal (a replica frozen past its claim wakes up just then), and the
// journal goes on with the new writer's own events: none of the old
// writer's is spliced in at a seq the new one reuses. With the replay before
// the fence, A's event was acknowledged after B's replay, and B's event of
// the same seq lost to it (a CI run showed a tool call's end without its
// start that way).
func TestTakeoverReplaysWhatTheWriterBeforeAppendedWhileItOpened(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	ctx := context.Background()
	evs := scriptedEvents(testSession.UID, 10)

	a := openWith(t, ctx, env.pub, evs[:4])

	var aErr error
	env.pub.afterFence = func() { // A wakes up while B opens the journal
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if aErr = a.Append(sctx, evs[4]); aErr == nil {
			aErr = a.Sync(sctx)
		}
	}
	b, replayed, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	env.pub.afterFence = nil
	if err != nil {
		t.Fatal(err)
	}
	acked := 4
	switch {
	case aErr == nil:
		acked = 5
	case !errors.Is(aErr, ErrFenced):
		t.Fatalf("A's append while B opened: %v, want success or ErrFenced", aErr)
	}
	if len(replayed) != acked {
		t.Fatalf("A got %d events acknowledged, B replayed %d", acked, len(replayed))
	}

	// B goes on with its own events (marked by their time).
	var mine []loop.Event
	for _, ev := range evs[len(replayed):] {
		ev.Time = ev.Time.Add(time.Hour)
		mine = append(mine, ev)
	}
	appendAll(t, ctx, b, mine)
	final, err := Replay(ctx, env.js, testSession, FromLeader())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSequence(final); err != nil || len(final) != len(evs) {
		t.Fatalf("journal after the takeover: %d events, %v", len(final), err)
	}
	for i, ev := range final[len(replayed):] {
		if !ev.Time.Equal(mine[i].Time) {
			t.Errorf("event %d (%s) is not B's: written at %s, B wrote %s", ev.Seq, ev.Kind, ev.Time, mine[i].Time)
		}
	}
}

// A takeover that dies between its fence and its replay (the manager
// killed, its context ended) leaves the old writer fenced and the journal
// whole: the next writer replays every acknowledged event and continues it.
func TestTakeoverThatDiesAfterItsFenceLeavesTheJournalWhole(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	ctx := context.Background()
	evs := scriptedEvents(testSession.UID, 8)
	a := openWith(t, ctx, env.pub, evs[:4])

	bctx, die := context.WithCancel(ctx)
	env.pub.afterFence = die
	if _, _, err := env.pub.OpenJournal(bctx, testSession, JournalOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("B's open, its context ended after the fence: %v, want context.Canceled", err)
	}
	env.pub.afterFence = nil

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Append(sctx, evs[4]); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(sctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's Sync after B's fence = %v, want ErrFenced", err)
	}
	c, replayed, err := env.pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 4 {
		t.Fatalf("C replayed %d events, want A's 4 acknowledged ones", len(replayed))
	}
	appendAll(t, ctx, c, evs[4:])
	final, err := Replay(ctx, env.js, testSession, FromLeader())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSequence(final); err != nil || len(final) != len(evs) {
		t.Fatalf("journal after C: %d events, %v", len(final), err)
	}
}

// openWith opens testSession's journal as a new writer and appends evs.
func openWith(t *testing.T, ctx context.Context, pub *Publisher, evs []loop.Event) *Journal {
	t.Helper()
	j, _, err := pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, ctx, j, evs)
	return j
}
