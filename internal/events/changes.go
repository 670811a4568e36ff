package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ChangesBucketPrefix starts the name of the Object Store bucket holding the
// recorded changes (patch, summary, artifacts) of one namespace's sessions:
// AGENT_CHANGES_<namespace>. One bucket per namespace lets a reader of a
// namespace read that bucket and no other (see ReaderPermissions).
const ChangesBucketPrefix = "AGENT_CHANGES_"

// ChangesBucket is the bucket of namespace's changes.
func ChangesBucket(namespace string) string { return ChangesBucketPrefix + namespace }

// changesNameObject is the object naming the newest incarnation of a
// session: names/<session-name> holds {"uid": ...}.
func changesNameObject(name string) string { return "names/" + name }

// changesObject is the object of a session's recording: <uid>/<object>.
func changesObject(uid, object string) string { return uid + "/" + object }

// ErrNoChanges is returned when a session has no recorded changes (none yet,
// or they expired with the journal's retention).
var ErrNoChanges = errors.New("no recorded changes")

// ChangesStore stores sessions' recorded changes in per-namespace Object
// Store buckets with the journal's retention (StreamConfig.MaxAge), storage
// and replicas. It implements changes.Store. It is safe for concurrent use.
type ChangesStore struct {
	js  jetstream.JetStream
	cfg StreamConfig

	mu      sync.Mutex
	buckets map[string]jetstream.ObjectStore
}

// NewChangesStore returns a store over js.
func NewChangesStore(js jetstream.JetStream, cfg StreamConfig) *ChangesStore {
	return &ChangesStore{js: js, cfg: cfg.withDefaults(), buckets: map[string]jetstream.ObjectStore{}}
}

// ChangesStore returns the changes store of the publisher's connection.
func (p *Publisher) ChangesStore() *ChangesStore { return NewChangesStore(p.js, p.cfg) }

// bucket opens (creating it the first time) the bucket of namespace.
func (s *ChangesStore) bucket(ctx context.Context, namespace string) (jetstream.ObjectStore, error) {
	if err := validateName(namespace, false); err != nil {
		return nil, fmt.Errorf("changes bucket: namespace %q: %w", namespace, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.buckets[namespace]; ok {
		return b, nil
	}
	_, oc, err := s.cfg.jetStreamConfigs()
	if err != nil {
		return nil, err
	}
	oc.Bucket = ChangesBucket(namespace)
	oc.Description = "agent-operator: recorded changes of the sessions of namespace " + namespace
	oc.MaxBytes = -1
	b, err := s.js.CreateOrUpdateObjectStore(ctx, oc)
	if err != nil {
		return nil, fmt.Errorf("ensure object store %s: %w", oc.Bucket, err)
	}
	s.buckets[namespace] = b
	return b, nil
}

// PutObject stores one object of the recording of session uid (name in
// namespace) and points names/<name> at uid.
func (s *ChangesStore) PutObject(ctx context.Context, namespace, name, uid, object string, data []byte) error {
	if err := validateName(name, true); err != nil {
		return fmt.Errorf("store changes: session name %q: %w", name, err)
	}
	if uid == "" || strings.ContainsAny(uid, "/.*> ") {
		return fmt.Errorf("store changes: invalid session uid %q", uid)
	}
	b, err := s.bucket(ctx, namespace)
	if err != nil {
		return err
	}
	if _, err := b.PutBytes(ctx, changesObject(uid, object), data); err != nil {
		return fmt.Errorf("store changes object %s: %w", object, err)
	}
	ptr, err := json.Marshal(map[string]string{"uid": uid})
	if err != nil {
		return fmt.Errorf("store changes: %w", err)
	}
	if _, err := b.PutBytes(ctx, changesNameObject(name), ptr); err != nil {
		return fmt.Errorf("store changes name %s: %w", name, err)
	}
	return nil
}

// ReadChanges reads one object of a session's recorded changes with any
// connection allowed to read its namespace (a reader credential will do).
// An empty session.UID reads the newest incarnation of the name. It returns
// an error wrapping ErrNoChanges when there is no such object.
func ReadChanges(ctx context.Context, js jetstream.JetStream, session SessionRef, object string) ([]byte, error) {
	if err := ValidateSession(session); err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	b, err := js.ObjectStore(ctx, ChangesBucket(session.Namespace))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("read changes of %s: %w", session, ErrNoChanges)
	}
	if err != nil {
		return nil, fmt.Errorf("read changes of %s: open object store: %w", session, err)
	}
	uid := session.UID
	if uid == "" {
		data, err := b.GetBytes(ctx, changesNameObject(session.Name))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("read changes of %s: %w", session, ErrNoChanges)
		}
		if err != nil {
			return nil, fmt.Errorf("read changes of %s: %w", session, err)
		}
		var ptr struct {
			UID string `json:"uid"`
		}
		if err := json.Unmarshal(data, &ptr); err != nil || ptr.UID == "" {
			return nil, fmt.Errorf("read changes of %s: bad name record", session)
		}
		uid = ptr.UID
	}
	data, err := b.GetBytes(ctx, changesObject(uid, object))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("read changes of %s: %s: %w", session, object, ErrNoChanges)
	}
	if err != nil {
		return nil, fmt.Errorf("read changes of %s: %s: %w", session, object, err)
	}
	return data, nil
}
