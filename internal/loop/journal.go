package loop

import "context"

// Journal makes a session durable (seed 002 FR-RES-04). The session calls
// Append for every event in Seq order; calls to Append are serialised but
// may come from different goroutines, and Sync may run concurrently with
// Append. Append may buffer, and must return when its ctx ends.
// Sync blocks until every event appended so far is durable. The session calls
// Sync at each boundary before it moves on:
//
//   - after USER_INPUT and STEERING_INJECTED events,
//   - after ASSISTANT_TEXT_END (before any tool of that turn runs),
//   - after each TOOL_CALL_START (before that tool runs),
//   - after each TOOL_CALL_END,
//   - before SESSION_END returns to the host.
//
// A Journal that cannot reach its store keeps retrying inside Sync (the
// session is then paused at that boundary) and returns an error only when ctx
// ends. A session restored from the journal (see Restore) never re-runs a
// tool call whose TOOL_CALL_START is journaled: if its TOOL_CALL_END is
// missing, the call gets an error result saying the run was interrupted and
// side effects may have happened.
type Journal interface {
	Append(ctx context.Context, ev Event) error
	Sync(ctx context.Context) error
}
