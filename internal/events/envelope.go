package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// EnvelopeVersion is the version of the Envelope JSON schema written by this
// package. Readers reject envelopes with a higher version.
const EnvelopeVersion = 1

// SessionRef identifies an AgentSession.
type SessionRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// String returns namespace/name.
func (r SessionRef) String() string { return r.Namespace + "/" + r.Name }

// Envelope is the JSON document published for every event. See docs/events.md.
type Envelope struct {
	// V is the schema version (EnvelopeVersion).
	V int `json:"v"`
	// ID is "<session-uid>/<seq>": the identity of the event.
	ID      string         `json:"id"`
	Session SessionRef     `json:"session"`
	Parent  *SessionRef    `json:"parent"`
	Kind    loop.EventKind `json:"kind"`
	Time    time.Time      `json:"time"`
	Seq     uint64         `json:"seq"`
	// Gen is the writer generation: 0 for the first Journal of a session,
	// incremented by OpenJournal each time the session resumes. Readers prefer
	// the higher generation when an un-synced event of a crashed writer and
	// the event of its successor share a seq.
	Gen  uint64         `json:"gen,omitempty"`
	Data loop.EventData `json:"data"`
	// Ref is set instead of Data when the event was too large for one
	// message: the whole envelope is in the Object Store.
	Ref *LargeRef `json:"ref,omitempty"`
}

// LargeRef points to an envelope stored in the Object Store.
type LargeRef struct {
	Bucket string `json:"bucket"`
	Object string `json:"object"`
	Size   int    `json:"size"`
	// SHA256 is the hex digest of the stored envelope JSON.
	SHA256 string `json:"sha256"`
}

// Event converts the envelope to a loop event. SessionID is the session uid.
func (e *Envelope) Event() loop.Event {
	return loop.Event{Kind: e.Kind, Time: e.Time, SessionID: e.Session.UID, Seq: e.Seq, Data: e.Data}
}

// EventID returns the envelope id of event seq of the session with uid.
func EventID(uid string, seq uint64) string {
	return uid + "/" + strconv.FormatUint(seq, 10)
}

// MsgID returns the Nats-Msg-Id used for dedupe: the event id for generation
// 0 and "<uid>/<seq>/<gen>" for later generations, so a resumed writer never
// collides with un-synced messages of a crashed one inside the dedupe window.
func MsgID(uid string, seq, gen uint64) string {
	if gen == 0 {
		return EventID(uid, seq)
	}
	return EventID(uid, seq) + "/" + strconv.FormatUint(gen, 10)
}

// SessionToken maps an object name to a subject token: '.' becomes '_'.
// The mapping is reversible because '_' cannot occur in a Kubernetes name.
func SessionToken(name string) string { return strings.ReplaceAll(name, ".", "_") }

// NameFromToken reverses SessionToken.
func NameFromToken(token string) string { return strings.ReplaceAll(token, "_", ".") }

// KindToken returns the lowercase subject token of an event kind.
func KindToken(k loop.EventKind) string { return strings.ToLower(string(k)) }

// SessionSubject returns the subject of one event kind of a session.
func SessionSubject(prefix string, s SessionRef, k loop.EventKind) string {
	return prefix + "." + s.Namespace + "." + SessionToken(s.Name) + "." + KindToken(k)
}

// FenceSubject is the subject of a session's writer fences (see
// Publisher.OpenJournal). "_fence" cannot be a namespace, so no session
// filter and no reader's per-namespace permission covers it.
func FenceSubject(prefix string, s SessionRef) string {
	return prefix + "._fence." + s.Namespace + "." + SessionToken(s.Name)
}

// SessionFilter returns the subject filter matching every event of a session.
func SessionFilter(prefix string, s SessionRef) string {
	return prefix + "." + s.Namespace + "." + SessionToken(s.Name) + ".*"
}

// ValidateSession checks that the namespace and name are valid Kubernetes
// names, so they cannot inject wildcards or extra tokens into a subject.
func ValidateSession(s SessionRef) error {
	if err := validateName(s.Namespace, false); err != nil {
		return fmt.Errorf("validate namespace %q: %w", s.Namespace, err)
	}
	if err := validateName(s.Name, true); err != nil {
		return fmt.Errorf("validate session name %q: %w", s.Name, err)
	}
	return nil
}

func validateName(v string, dots bool) error {
	if v == "" {
		return fmt.Errorf("empty")
	}
	if len(v) > 253 {
		return fmt.Errorf("longer than 253 characters")
	}
	for _, c := range v {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c == '.' && dots:
		default:
			return fmt.Errorf("invalid character %q", c)
		}
	}
	return nil
}

// decodeEnvelope parses one message body.
func decodeEnvelope(data []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode envelope: %w", err)
	}
	if env.V < 1 || env.V > EnvelopeVersion {
		return nil, fmt.Errorf("decode envelope: unsupported version %d", env.V)
	}
	return &env, nil
}
