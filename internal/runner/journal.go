package runner

import (
	"context"
	"sync/atomic"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// detachable passes events to a journal until it is detached. The runner
// detaches before closing the loop when it suspends a session or the manager
// shuts down: the loop then ends with SESSION_END(CLOSED), which must not
// reach the journal, because a journal ending in CLOSED cannot be resumed.
type detachable struct {
	j        loop.Journal
	detached atomic.Bool
}

func (d *detachable) Append(ctx context.Context, ev loop.Event) error {
	if d.detached.Load() {
		return nil
	}
	return d.j.Append(ctx, ev)
}

func (d *detachable) Sync(ctx context.Context) error {
	if d.detached.Load() {
		return nil
	}
	return d.j.Sync(ctx)
}

func (d *detachable) detach() {
	// Flush what was appended before; errors end up in the next resume.
	d.detached.Store(true)
}
