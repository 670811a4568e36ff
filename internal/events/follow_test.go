package events

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-operator/agent-operator/internal/loop"
)

func TestFollowReplaysThenFollowsLive(t *testing.T) {
	tests := []struct {
		name    string
		fromSeq uint64
	}{
		{"from the start", 1},
		{"from seq 0 means the start", 0},
		{"from the middle", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
			j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
			evs := scriptedEvents(testSession.UID, 30)
			appendAll(t, ctx, j, evs[:10])

			got := make(chan loop.Event, len(evs))
			done := make(chan error, 1)
			go func() {
				done <- Follow(ctx, env.js, testSession, tt.fromSeq, func(ev loop.Event) error {
					got <- ev
					if ev.Seq == 30 {
						return ErrStop
					}
					return nil
				})
			}()
			// Wait until the replayed part arrived, then publish live.
			var received []loop.Event
			for len(received) < 10-int(max(tt.fromSeq, 1))+1 {
				received = append(received, <-got)
			}
			appendAll(t, ctx, j, evs[10:])
			if err := <-done; err != nil {
				t.Fatalf("Follow: %v", err)
			}
			close(got)
			for ev := range got {
				received = append(received, ev)
			}
			if diff := cmp.Diff(evs[max(tt.fromSeq, 1)-1:], received); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFollowEndsWithContext(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	done := make(chan error, 1)
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	appendAll(t, t.Context(), j, scriptedEvents(testSession.UID, 1))
	go func() {
		done <- Follow(ctx, env.js, testSession, 1, func(loop.Event) error { close(started); return nil })
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Follow after cancel = %v, want context.Canceled", err)
	}
}

func TestFollowReturnsCallbackError(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	appendAll(t, t.Context(), j, scriptedEvents(testSession.UID, 3))
	boom := errors.New("boom")
	err := Follow(t.Context(), env.js, testSession, 1, func(loop.Event) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Follow = %v, want boom", err)
	}
}

// BenchmarkPublish measures acknowledged events per second through a
// Journal (Append with the default window, one Sync at the end) on the
// embedded file-store server.
func BenchmarkPublish(b *testing.B) {
	env := newTestEnv(b, EmbeddedOptions{}, PublisherOptions{})
	ctx := context.Background()
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	evs := scriptedEvents(testSession.UID, 6)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		ev := evs[i%len(evs)]
		ev.Seq = uint64(i + 1)
		if err := j.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	if err := j.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkPublishSyncEach measures the latency of Append+Sync per event,
// the cost of a boundary event.
func BenchmarkPublishSyncEach(b *testing.B) {
	env := newTestEnv(b, EmbeddedOptions{}, PublisherOptions{})
	ctx := context.Background()
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	evs := scriptedEvents(testSession.UID, 6)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := evs[i%len(evs)]
		ev.Seq = uint64(i + 1)
		if err := j.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
		if err := j.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFollowLag measures the time from Append to receipt by a Follow
// subscriber, one event at a time (no queueing), reporting the median and
// p99 in microseconds.
func BenchmarkFollowLag(b *testing.B) {
	env := newTestEnv(b, EmbeddedOptions{}, PublisherOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, _ := env.pub.NewJournal(testSession, 0, JournalOptions{})
	evs := scriptedEvents(testSession.UID, 6)
	got := make(chan time.Time, 1)
	go func() {
		_ = Follow(ctx, env.js, testSession, 1, func(ev loop.Event) error {
			got <- time.Now()
			return nil
		})
	}()
	lags := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		ev := evs[i%len(evs)]
		ev.Seq = uint64(i)
		sent := time.Now()
		if err := j.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
		lags = append(lags, (<-got).Sub(sent))
	}
	b.StopTimer()
	if err := j.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	sort.Slice(lags, func(a, c int) bool { return lags[a] < lags[c] })
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds()), "p99-µs")
}
