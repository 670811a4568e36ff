package changes

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxBytesInFlight is the default of Recorder.MaxBytesInFlight: two
// packs or patches of the largest size at once.
const DefaultMaxBytesInFlight = 2 * DefaultMaxPackBytes

// bytesBudget bounds the bytes of packs and patches the manager holds at
// once over all sessions: each is up to its own limit (DefaultMaxPackBytes,
// MaxPatchBytes), and without a shared bound many sessions ending at once
// (a fan-out, hostile workloads in several namespaces) would hold their
// sum. A hold waits, first come first served, for what others release.
type bytesBudget struct {
	sem     *semaphore.Weighted
	size    int64
	held    atomic.Int64
	waiting atomic.Int32
}

func newBytesBudget(size int64) *bytesBudget {
	return &bytesBudget{sem: semaphore.NewWeighted(size), size: size}
}

// hold takes n bytes (at most the whole budget) and returns their release,
// which may be called more than once. A nil budget holds nothing.
func (b *bytesBudget) hold(ctx context.Context, n int64) (func(), error) {
	if b == nil || n <= 0 {
		return func() {}, nil
	}
	n = min(n, b.size)
	if !b.sem.TryAcquire(n) {
		b.waiting.Add(1)
		err := b.sem.Acquire(ctx, n)
		b.waiting.Add(-1)
		if err != nil {
			return nil, fmt.Errorf("wait for %d bytes of the manager's memory for changes (%d of %d in use by other sessions): %w",
				n, b.held.Load(), b.size, err)
		}
	}
	b.held.Add(n)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			b.held.Add(-n)
			b.sem.Release(n)
		}
	}, nil
}
