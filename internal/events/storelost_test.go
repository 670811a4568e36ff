package events

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A server that comes back without its store (the stream is gone): the
// journal makes the stream again and goes on appending, so a running
// session does not wait for a manager restart; what the store lost stays
// lost, and a replay (the longest gap-free prefix) says so by being empty.
// A journal opened after the loss (a session starting) fences the stream it
// makes again.
func TestJournalRecreatesALostStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fenced bool // OpenJournal, as the runner does
		after  bool // opened after the loss
	}{
		{"unfenced journal", false, false},
		{"fenced journal", true, false},
		{"journal opened after the loss", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			var restored atomic.Int32
			env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{AckTimeout: 300 * time.Millisecond,
				OnStreamRestored: func() { restored.Add(1) }})
			lose := func() {
				if err := env.js.DeleteStream(ctx, env.pub.StreamConfig().Name); err != nil {
					t.Fatal(err)
				}
			}
			opts := JournalOptions{RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}
			evs := scriptedEvents(testSession.UID, 30)
			if tc.after {
				lose()
			}
			j := openTestJournal(t, env, tc.fenced, opts)
			appendAll(t, ctx, j, evs[:10])
			if !tc.after {
				lose()
			}
			for _, ev := range evs[10:20] {
				if err := j.Append(ctx, ev); err != nil {
					t.Fatalf("Append after the stream was lost: %v", err)
				}
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := j.Sync(sctx); err != nil {
				t.Fatalf("Sync after the stream was lost: %v", err)
			}
			appendAll(t, ctx, j, evs[20:])
			if n := restored.Load(); n != 1 {
				t.Errorf("OnStreamRestored called %d times, want 1", n)
			}
			got, err := Replay(ctx, env.js, testSession)
			if err != nil {
				t.Fatal(err)
			}
			if tc.after {
				if len(got) != len(evs) {
					t.Errorf("replay = %d events, want all %d (nothing was lost)", len(got), len(evs))
				}
				return
			}
			if len(got) != 0 {
				t.Errorf("replay = %d events, want none (events 1..10 are lost)", len(got))
			}
			n := 0
			for _, m := range rawMessages(t, ctx, env.js, env.pub.StreamConfig()) {
				if m.Subject != FenceSubject(env.pub.StreamConfig().Prefix, testSession) {
					n++
				}
			}
			if n != 20 {
				t.Errorf("the session's subject holds %d events, want the 20 appended after the loss", n)
			}
		})
	}
}

// One journal looking for a lost stream never holds up the others: a
// journal that finds the look under way reports the journal unavailable
// and retries after its backoff, and makes the stream once the look ended.
// (The first version queued every journal behind one look whose request,
// sent while the connection moved between cluster nodes, was never
// answered: every session stopped with JournalAvailable still True.)
func TestJournalDoesNotQueueBehindAnotherLookForTheStream(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{AckTimeout: 300 * time.Millisecond})
	states := make(stateRecorder, 64)
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{OnStateChange: states.record, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	evs := scriptedEvents(testSession.UID, 4)
	appendAll(t, ctx, j, evs[:2])
	env.pub.restoring <- struct{}{} // another journal's look, hung
	if err := env.js.DeleteStream(ctx, env.pub.StreamConfig().Name); err != nil {
		t.Fatal(err)
	}
	synced := make(chan error, 1)
	go func() {
		for _, ev := range evs[2:] {
			if err := j.Append(ctx, ev); err != nil {
				synced <- err
				return
			}
		}
		synced <- j.Sync(ctx)
	}()
	select {
	case avail := <-states:
		if avail {
			t.Fatal("first state change reports available")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the journal waited behind the other look without saying it is unavailable")
	}
	<-env.pub.restoring // the other look ends
	if err := <-synced; err != nil {
		t.Fatalf("Sync once the look ended: %v", err)
	}
}

// The large-event bucket is made again too when it is gone: alone (it is
// made after the stream, so a manager that died between the two, or a
// request that failed there, leaves the stream without it; or it was
// deleted by hand), or with the whole store and found first by a large
// event. The journal used to retry the object's put until a manager
// restart, the session waiting with its journal unavailable.
func TestJournalRecreatesALostBucket(t *testing.T) {
	for _, tc := range []struct {
		name         string
		streamToo    bool
		fenced, gone bool // OpenJournal; the stream's events before the loss are gone
	}{
		{name: "bucket alone, fenced journal", fenced: true},
		{name: "bucket alone, unfenced journal"},
		{name: "whole store, found by a large event", streamToo: true, gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			var restored atomic.Int32
			env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{AckTimeout: 300 * time.Millisecond,
				Stream: StreamConfig{MaxMsgSize: 16 << 10}, OnStreamRestored: func() { restored.Add(1) }})
			opts := JournalOptions{RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}
			j := openTestJournal(t, env, tc.fenced, opts)
			evs := scriptedEvents(testSession.UID, 6)
			for i := range evs { // written now: the bucket made again is younger
				evs[i].Time = time.Now().UTC().Add(time.Duration(i) * time.Millisecond)
			}
			evs[1].Data.Output = strings.Repeat("before the loss\n", 4<<10) // 64 KiB: in the bucket
			evs[5].Data.Output = strings.Repeat("after the loss\n", 4<<10)
			appendAll(t, ctx, j, evs[:3])

			if err := env.js.DeleteObjectStore(ctx, DefaultLargeBucket); err != nil {
				t.Fatal(err)
			}
			if tc.streamToo {
				if err := env.js.DeleteStream(ctx, env.pub.StreamConfig().Name); err != nil {
					t.Fatal(err)
				}
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for _, ev := range evs[3:] {
				if err := j.Append(sctx, ev); err != nil {
					t.Fatalf("Append after the loss: %v", err)
				}
			}
			if err := j.Sync(sctx); err != nil {
				t.Fatalf("Sync after the loss: %v", err)
			}
			if n := restored.Load(); n != 1 {
				t.Errorf("OnStreamRestored called %d times, want 1", n)
			}
			if tc.gone {
				return // the replay is empty: TestJournalRecreatesALostStream
			}
			// The large event appended before the loss went with the bucket:
			// a replay (the longest gap-free prefix) ends before it, instead
			// of failing, and a resume failing with it, forever.
			got, err := Replay(ctx, env.js, testSession)
			if err != nil || len(got) != 1 {
				t.Fatalf("replay after the loss = %d events (%v), want the 1 before the lost large event", len(got), err)
			}
			// A writer that resumes the session from there appends anew; a
			// replay then has them all, the older writer's copies skipped.
			j2, replayed, err := env.pub.OpenJournal(sctx, testSession, opts)
			if err != nil || len(replayed) != 1 {
				t.Fatalf("OpenJournal after the loss: %d events (%v), want 1", len(replayed), err)
			}
			appendAll(t, ctx, j2, evs[1:])
			got, err = Replay(ctx, env.js, testSession)
			if err != nil {
				t.Fatalf("Replay after the resume: %v", err)
			}
			if diff := cmp.Diff(evs, got); diff != "" {
				t.Errorf("replay after the resume (-want +got):\n%.2000s", diff)
			}
		})
	}
}

// An object missing from a bucket older than its event is not taken for
// lost: a read may be served by a replica that has not caught up (the
// bucket allows direct gets), so the replay fails, to be tried again,
// rather than end the prefix before an event that is still there.
func TestReplayDoesNotTakeAnObjectMissingFromAnOlderBucketForLost(t *testing.T) {
	ctx := t.Context()
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{Stream: StreamConfig{MaxMsgSize: 16 << 10}})
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	evs := scriptedEvents(testSession.UID, 3)
	for i := range evs {
		evs[i].Time = time.Now().UTC().Add(time.Minute) // after the bucket's creation, whatever the clocks
	}
	evs[1].Data.Output = strings.Repeat("large\n", 8<<10)
	appendAll(t, ctx, j, evs)
	obs, name := onlyLargeObject(t, env)
	if err := obs.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if got, err := Replay(ctx, env.js, testSession); err == nil {
		t.Fatalf("replay = %d events and no error, want an error naming the missing object", len(got))
	}
}

// openTestJournal opens testSession's journal as the runner does (fenced)
// or a bare one at seq 0.
func openTestJournal(t *testing.T, env *testEnv, fenced bool, opts JournalOptions) *Journal {
	t.Helper()
	if !fenced {
		j, _ := env.pub.NewJournal(testSession, 0, opts)
		return j
	}
	j, _, err := env.pub.OpenJournal(t.Context(), testSession, opts)
	if err != nil {
		t.Fatalf("OpenJournal: %v", err)
	}
	return j
}
