package events

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// PurgeSession deletes the journal of a session: every message on its
// subjects and its large events in the Object Store. The controller calls it
// from the AgentSession finalizer when events should not outlive the object.
// It removes the events of every incarnation with that name (they share the
// subjects); large events are removed for session.UID only, or for all
// incarnations when it is empty.
func PurgeSession(ctx context.Context, js jetstream.JetStream, session SessionRef, opts ...ReadOption) error {
	cfg := readConfig(opts).stream
	if err := ValidateSession(session); err != nil {
		return fmt.Errorf("purge session: %w", err)
	}
	stream, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		return fmt.Errorf("purge session %s: open stream %s: %w", session, cfg.Name, err)
	}
	// Collect the uids first, so large events of older incarnations go too.
	uids := map[string]bool{}
	if session.UID != "" {
		uids[session.UID] = true
	} else if err := collectUIDs(ctx, js, cfg, session, uids); err != nil {
		return fmt.Errorf("purge session %s: %w", session, err)
	}
	for _, subj := range []string{SessionFilter(cfg.Prefix, session), FenceSubject(cfg.Prefix, session)} {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("purge session %s: %w", session, err)
		}
	}
	obs, err := js.ObjectStore(ctx, cfg.LargeBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge session %s: open object store: %w", session, err)
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge session %s: list large events: %w", session, err)
	}
	for _, info := range infos {
		uid, _, _ := strings.Cut(info.Name, "/")
		if !uids[uid] {
			continue
		}
		if err := obs.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("purge session %s: delete large event %s: %w", session, info.Name, err)
		}
	}
	return nil
}

// collectUIDs adds the uid of every message on the session's subjects.
func collectUIDs(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, session SessionRef, uids map[string]bool) error {
	last, err := lastMessage(ctx, js, cfg.Name, SessionFilter(cfg.Prefix, session), true)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("last message: %w", err)
	}
	r := newReader(js, "")
	r.onEnvelope = func(env *Envelope) { uids[env.Session.UID] = true }
	return r.consume(ctx, cfg, SessionFilter(cfg.Prefix, session), func(_ *Envelope, meta *jetstream.MsgMetadata) (bool, error) {
		return meta.Sequence.Stream < last.Sequence, nil
	})
}
