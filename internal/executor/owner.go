package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Owner identifies the operator instance driving a session, as of its claim:
// a stream whose hello carries one is refused (CodeNotOwner) as soon as the
// workspace has seen a newer driver of the same session. See the package doc
// ("Owner records") and docs/security.md ("Superseded drivers").
type Owner struct {
	// SessionUID is the AgentSession being driven. It names the session's
	// owner record, so it is limited to letters, digits, '-' and '_'.
	SessionUID string `json:"sessionUID"`
	// Holder is the driving instance (the claim Lease's holderIdentity).
	Holder string `json:"holder"`
	// Epoch is the claim's fence (the Lease's leaseTransitions): it grows
	// with every change of the session's driver.
	Epoch int64 `json:"epoch"`
}

// IsZero reports whether o is the zero Owner (a stream that is not checked).
func (o Owner) IsZero() bool { return o == Owner{} }

// Limits of an Owner.
const (
	maxSessionUID = 128
	maxHolder     = 256
)

// Validate reports why o cannot be used as an owner token.
func (o Owner) Validate() error {
	if o.SessionUID == "" || len(o.SessionUID) > maxSessionUID {
		return fmt.Errorf("owner: the session UID must have 1 to %d characters, got %d", maxSessionUID, len(o.SessionUID))
	}
	for i := 0; i < len(o.SessionUID); i++ {
		c := o.SessionUID[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("owner: session UID %q: only letters, digits, '-' and '_' are allowed", o.SessionUID)
		}
	}
	if o.Holder == "" || len(o.Holder) > maxHolder {
		return fmt.Errorf("owner: the holder must have 1 to %d bytes, got %d", maxHolder, len(o.Holder))
	}
	if o.Epoch < 0 {
		return fmt.Errorf("owner: negative epoch %d", o.Epoch)
	}
	return nil
}

// CodeNotOwner is the error code of a call (or hello) refused because the
// stream's Owner is not the session's current driver in the workspace's
// owner record, or because that record cannot be read safely.
const CodeNotOwner = "not_owner"

// ErrNotOwner is what a CodeNotOwner error unwraps to: the workspace
// refuses this driver of the session, because a newer one has used it (or
// its owner record is unusable). The caller must stop driving the session.
var ErrNotOwner = errors.New("not the session's current driver")

// DefaultOwnerDir is where the executor keeps the owner records of a pod,
// shared by all its serve processes (ServeOptions.OwnerDir).
const DefaultOwnerDir = "/tmp/agent-executor-owners"

// Bounds of owner record handling. A record is a few dozen bytes; anything
// larger was not written by an executor. The lock is polled, so a process
// that holds it forever delays its own session's calls by lockTimeout and
// then fails them.
const (
	maxOwnerRecord   = 4 << 10
	ownerLockTimeout = 2 * time.Second
	ownerLockPoll    = 5 * time.Millisecond
)

// ownerRecord is the JSON of a session's owner record file.
type ownerRecord struct {
	Holder string `json:"holder"`
	Epoch  int64  `json:"epoch"`
}

// notOwnerError is a refusal: the record names cur, not the stream's owner.
type notOwnerError struct {
	mine, cur Owner
}

func (e *notOwnerError) Error() string {
	return fmt.Sprintf("session %s is driven by %q at epoch %d; this stream's driver %q at epoch %d was superseded",
		e.cur.SessionUID, e.cur.Holder, e.cur.Epoch, e.mine.Holder, e.mine.Epoch)
}

func (e *notOwnerError) Unwrap() error { return ErrNotOwner }

// unusableRecordError is a record that cannot be trusted (not a regular
// file, too large, not an owner record): the session's calls are refused
// until it is removed.
type unusableRecordError struct {
	uid string
	err error
}

func (e *unusableRecordError) Error() string {
	return fmt.Sprintf("owner record of session %s is unusable, refusing to drive the session: %v", e.uid, e.err)
}

func (e *unusableRecordError) Unwrap() []error { return []error{ErrNotOwner, e.err} }

// decide compares the stream's owner with the record (nil: none) and
// returns the record to write (nil: leave it) or a refusal.
func decide(mine Owner, rec *ownerRecord) (*ownerRecord, error) {
	switch {
	case rec == nil || rec.Epoch < mine.Epoch:
		return &ownerRecord{Holder: mine.Holder, Epoch: mine.Epoch}, nil
	case rec.Epoch == mine.Epoch && rec.Holder == mine.Holder:
		return nil, nil
	default:
		return nil, &notOwnerError{mine: mine, cur: Owner{SessionUID: mine.SessionUID, Holder: rec.Holder, Epoch: rec.Epoch}}
	}
}

// parseOwnerRecord decodes a record's bytes (at most maxOwnerRecord).
func parseOwnerRecord(b []byte) (*ownerRecord, error) {
	var rec ownerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if rec.Holder == "" || len(rec.Holder) > maxHolder || rec.Epoch < 0 {
		return nil, fmt.Errorf("not an owner record (holder of %d bytes, epoch %d)", len(rec.Holder), rec.Epoch)
	}
	return &rec, nil
}

// ownerGuard checks one stream's owner against the pod's owner records.
type ownerGuard struct {
	dir   string
	owner Owner
}

// check refuses the stream when the record names a newer driver (or the
// same epoch held by another), and records the stream's owner when it is
// newer than the record. It never lowers a record's epoch.
func (g *ownerGuard) check(ctx context.Context) error {
	if g == nil {
		return nil
	}
	return checkOwnerRecord(ctx, g.dir, g.owner)
}

// notOwnerWire is the error frame of a refusal.
func notOwnerWire(err error) *WireError {
	we := &WireError{Code: CodeNotOwner, Message: err.Error()}
	var no *notOwnerError
	if errors.As(err, &no) {
		cur := no.cur
		we.Owner = &cur
	}
	return we
}
