package agentsession

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// DefaultStatusInterval is how often, at most, a session's progress-only
// status changes are written (--status-interval).
const DefaultStatusInterval = 5 * time.Second

// deferStatus decides when the status change from old to new is written: 0
// for at once, else how long to wait. Only a progress-only change waits:
// counters, tokens, cost, result text, plan, context and working time, the
// event sequence, status.children and childrenSummary (the children's tree
// figures and phases). A change of anything else (phase, conditions,
// messages delivered, pod, ...)
// and a final phase are written at once, and so is any change when interval
// is 0 or nothing was written yet (lastWrite zero). A progress change waits
// until interval has passed since lastWrite, and never longer than interval,
// whatever the clock did (now before lastWrite: the clock stepped back).
func deferStatus(old, new *agentsv1.AgentSessionStatus, lastWrite, now time.Time, interval time.Duration) time.Duration {
	if interval <= 0 || lastWrite.IsZero() || new.Phase.IsFinal() || !progressOnly(old, new) {
		return 0
	}
	since := now.Sub(lastWrite)
	switch {
	case since < 0:
		return interval // the clock stepped back: one interval, never more
	case since >= interval:
		return 0
	}
	return interval - since
}

// progressOnly reports whether old and new differ only in progress fields.
func progressOnly(old, new *agentsv1.AgentSessionStatus) bool {
	return sameStatus(withoutProgress(old), withoutProgress(new))
}

// sameStatus reports whether a and b are the same status as the API server
// stores it: their JSON is equal. Times are kept to the second there, so a
// time read back from the API server equals the one in memory it was
// written from (a change recorded at 12:00:00.5 is stored as 12:00:00),
// and a nil list equals an empty one. A status that cannot be encoded is
// taken as changed.
func sameStatus(a, b *agentsv1.AgentSessionStatus) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// endHeld reports whether the change from old to new ends the session
// (its phase becomes final) while the runner that drives it, p, has not
// ended yet. Then nothing is written: the session's end is one write. The
// runner decided the end (or was told to stop, by spec.abort or a lost
// workspace) and is finishing: recording the input's change, draining its
// last events, releasing its claim. It notifies when it has ended, and
// that reconcile writes the final phase together with the final figures,
// the change, the owner and the conditions. The runner's end is bounded
// (its cleanup and the change's git commands have timeouts); the caller
// looks again after stopPoll besides.
func endHeld(old, new *agentsv1.AgentSessionStatus, p *runner.Progress) bool {
	return p != nil && !p.Done && new.Phase.IsFinal() && !old.Phase.IsFinal()
}

// withoutProgress returns a copy of st with the progress fields cleared:
// what is left is what is written at once when it changes.
func withoutProgress(st *agentsv1.AgentSessionStatus) *agentsv1.AgentSessionStatus {
	c := st.DeepCopy()
	c.Turns, c.ToolCalls, c.Usage = 0, 0, agentsv1.Usage{}
	c.Cost, c.Currency, c.TreeCost, c.TreeTokens = "", "", "", 0
	c.Result, c.ResultTruncated = "", false
	c.LastEventSequence, c.WorkingTime = 0, nil
	c.Context, c.Plan = nil, nil
	// The children's list and summary too, their phases included: they
	// change with every child of a fan-out, and the parent's own decisions
	// read the children, not this list (a child's phase change still wakes
	// the parent at once, see parentwake.go).
	c.Children, c.ChildrenSummary = nil, nil
	// The driving instance: its claim Lease, not this field, is what keeps
	// another instance out, and the field is written together with the
	// event sequence it goes with (a journal found empty is judged by both,
	// runner/session.go).
	c.Owner = ""
	// The message of a session starting: its clearing waits for the next
	// write, so a short session goes Running -> its end in two writes.
	for i := range c.Conditions {
		if cond := &c.Conditions[i]; cond.Reason == agentsv1.ReasonRunning && cond.Message == startingMessage {
			cond.Message = ""
		}
	}
	return c
}

// statusWrites remembers when each session's status was last written, for
// deferStatus. A session is forgotten once it ended or was deleted.
type statusWrites struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

// wait is deferStatus for the session key. A clock found to have stepped
// back is taken as the last write, so the wait stays one interval.
func (w *statusWrites) wait(key types.NamespacedName, old, new *agentsv1.AgentSessionStatus, now time.Time, interval time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	last := w.last[key]
	if now.Before(last) {
		w.last[key] = now
	}
	return deferStatus(old, new, last, now, interval)
}

// wrote records a status write of the session key at now; a session that
// ended is forgotten instead (its next write, if any, is not deferred).
func (w *statusWrites) wrote(key types.NamespacedName, st *agentsv1.AgentSessionStatus, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st.Phase.IsFinal() {
		delete(w.last, key)
		return
	}
	if w.last == nil {
		w.last = map[types.NamespacedName]time.Time{}
	}
	w.last[key] = now
}

// forget drops what is remembered of the session key.
func (w *statusWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, key)
}

// size is the number of sessions remembered.
func (w *statusWrites) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.last)
}
