package loop

import (
	"context"
	"fmt"
)

// EventChangesRecorded is emitted by the host, not the loop, after an input
// ended: the session's change was recorded (Message is a one-line summary,
// Changes the structured one, without file contents).
const EventChangesRecorded EventKind = "CHANGES_RECORDED"

// hostEvents are the kinds a host may emit with EmitHostEvent.
var hostEvents = map[EventKind]bool{EventChangesRecorded: true}

// EmitHostEvent emits an event the host (not the loop) produced, such as
// CHANGES_RECORDED, with the session's next seq, and syncs the journal. It is
// only allowed while the session is idle (IDLE or AWAITING_INPUT), so it never
// interleaves with an input's events; restore ignores such events.
func (s *Session) EmitHostEvent(ctx context.Context, kind EventKind, data EventData) error {
	if !hostEvents[kind] {
		return fmt.Errorf("emit host event: %s is not a host event kind", kind)
	}
	if st := s.State(); st != StateIdle && st != StateAwaitingInput {
		return fmt.Errorf("emit host event %s: session is %s, not idle", kind, st)
	}
	return s.emitSync(ctx, kind, data)
}
