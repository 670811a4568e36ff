package loop

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// emitter sequences, journals and delivers events.
//
// Buffer policy: at most capacity events wait for the consumer. When the
// buffer is full,
//   - deltas (ASSISTANT_TEXT_DELTA, TOOL_CALL_OUTPUT_DELTA) are held back
//     unsequenced and coalesced losslessly with held deltas of the same kind
//     and call (their text is concatenated); they never block the loop and
//     are released, in order per call, as soon as there is room and always
//     before the next non-delta event;
//   - every other event blocks its emitter until there is room or its ctx
//     ends; when ctx ends the event is still queued beyond capacity, so
//     nothing is ever dropped and abort/Close complete without waiting for
//     the consumer.
//
// Seq is assigned when an event enters the buffer, so Seq has no gaps and
// the journal sees events in Seq order (Append runs under the lock).
type emitter struct {
	sid      string
	now      func() time.Time
	journal  Journal
	baseCtx  context.Context // for deltas released by the deliverer; see setBase
	capacity int

	mu      sync.Mutex
	queue   []Event
	pending []Event
	seq     uint64
	room    chan struct{} // closed and replaced when the consumer takes an event
	notify  chan struct{}
	closed  bool
	jerr    error
	out     chan Event
	started bool
}

func newEmitter(base context.Context, sid string, now func() time.Time, j Journal, capacity int, seq uint64) *emitter {
	return &emitter{
		sid: sid, now: now, journal: j, capacity: capacity, seq: seq,
		baseCtx: base,
		room:    make(chan struct{}), notify: make(chan struct{}, 1), out: make(chan Event),
	}
}

// setBase sets the context the deliverer journals held deltas with. The
// session sets it to the running input's context, so that an abort also
// unblocks a journal Append that waits for an unreachable store while the
// deliverer holds the lock.
func (e *emitter) setBase(ctx context.Context) {
	e.mu.Lock()
	e.baseCtx = ctx
	e.mu.Unlock()
}

// events starts the deliverer on first use and returns the channel.
func (e *emitter) events() <-chan Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		e.started = true
		go e.deliver()
	}
	return e.out
}

func (e *emitter) deliver() {
	defer close(e.out)
	for {
		e.mu.Lock()
		for len(e.queue) == 0 {
			if e.closed {
				e.mu.Unlock()
				return
			}
			e.mu.Unlock()
			<-e.notify
			e.mu.Lock()
		}
		ev := e.queue[0]
		e.mu.Unlock()
		e.out <- ev
		e.mu.Lock()
		e.queue[0] = Event{}
		e.queue = e.queue[1:]
		e.releaseLocked(e.baseCtx, false)
		close(e.room)
		e.room = make(chan struct{})
		e.mu.Unlock()
	}
}

func isDelta(k EventKind) bool {
	return k == EventAssistantTextDelta || k == EventToolCallOutputDelta
}

// emit queues a non-delta event, waiting for room as the policy says.
func (e *emitter) emit(ctx context.Context, kind EventKind, data EventData) (Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return Event{}, fmt.Errorf("emit %s: %w", kind, ErrClosed)
	}
	for len(e.pending) > 0 {
		e.waitRoomLocked(ctx)
		if len(e.pending) == 0 { // the deliverer released them meanwhile
			break
		}
		e.pushLocked(ctx, e.pending[0])
		e.pending = e.pending[1:]
	}
	e.waitRoomLocked(ctx)
	ev := e.pushLocked(ctx, Event{Kind: kind, Time: e.now(), SessionID: e.sid, Data: data})
	return ev, e.jerr
}

// emitDelta queues a delta without ever blocking.
func (e *emitter) emitDelta(kind EventKind, callID, delta string) {
	if delta == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if len(e.pending) == 0 && len(e.queue) < e.capacity {
		e.pushLocked(e.baseCtx, Event{Kind: kind, Time: e.now(), SessionID: e.sid,
			Data: EventData{CallID: callID, Delta: delta}})
		return
	}
	for i := range e.pending {
		p := &e.pending[i]
		if p.Kind == kind && p.Data.CallID == callID {
			p.Data.Delta += delta
			return
		}
	}
	e.pending = append(e.pending, Event{Kind: kind, Time: e.now(), SessionID: e.sid,
		Data: EventData{CallID: callID, Delta: delta}})
}

// final queues the last event beyond capacity and closes the stream.
func (e *emitter) final(ctx context.Context, kind EventKind, data EventData) (Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return Event{}, fmt.Errorf("emit %s: %w", kind, ErrClosed)
	}
	e.releaseLocked(ctx, true)
	ev := e.pushLocked(ctx, Event{Kind: kind, Time: e.now(), SessionID: e.sid, Data: data})
	e.closed = true
	e.wakeLocked()
	return ev, e.jerr
}

// releaseLocked moves held deltas into the buffer while there is room (or
// all of them when force is set).
func (e *emitter) releaseLocked(ctx context.Context, force bool) {
	for len(e.pending) > 0 && (force || len(e.queue) < e.capacity) {
		e.pushLocked(ctx, e.pending[0])
		e.pending = e.pending[1:]
	}
}

// waitRoomLocked waits until the buffer has room or ctx ends.
func (e *emitter) waitRoomLocked(ctx context.Context) {
	for len(e.queue) >= e.capacity {
		room := e.room
		e.mu.Unlock()
		select {
		case <-room:
			e.mu.Lock()
		case <-ctx.Done():
			e.mu.Lock()
			return
		}
	}
}

func (e *emitter) pushLocked(ctx context.Context, ev Event) Event {
	e.seq++
	ev.Seq = e.seq
	if e.journal != nil {
		if err := e.journal.Append(ctx, ev); err != nil && e.jerr == nil {
			e.jerr = fmt.Errorf("journal event %d: %w", ev.Seq, err)
		}
	}
	e.queue = append(e.queue, ev)
	e.wakeLocked()
	return ev
}

func (e *emitter) wakeLocked() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// lastSeq returns the Seq of the last sequenced event.
func (e *emitter) lastSeq() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq
}
