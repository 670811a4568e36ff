package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// ErrStop may be returned by a Follow callback to end Follow without error.
var ErrStop = errors.New("stop following")

// ReadOption configures Replay, Follow and PurgeSession.
type ReadOption func(*readOptions)

type readOptions struct {
	stream     StreamConfig
	fromLeader bool
}

// WithStreamConfig reads from the stream and bucket of cfg instead of the
// defaults.
func WithStreamConfig(cfg StreamConfig) ReadOption {
	return func(o *readOptions) { o.stream = cfg.withDefaults() }
}

// FromLeader asks the stream's leader which message is a session's newest
// ($JS.API.STREAM.MSG.GET), so that a replay returns every acknowledged
// event. Without it any replica may answer a direct get, the only form a
// reader's permissions allow (its subject names the session's namespace):
// on a replicated stream a follower may not have the newest acknowledged
// events yet, and a replay may end a few events short of the leader's
// journal (Follow then delivers them as they arrive). The journal's own
// reads (OpenJournal, the fence check, PurgeSession) always ask the leader.
func FromLeader() ReadOption {
	return func(o *readOptions) { o.fromLeader = true }
}

func readConfig(opts []ReadOption) readOptions {
	ro := readOptions{stream: DefaultStreamConfig()}
	for _, o := range opts {
		o(&ro)
	}
	return ro
}

// Replay reads the whole journal of a session, up to the last message stored
// when it is called, and returns its events in seq order: duplicates are
// dropped, events stored out of order are put back in order, large events
// are fetched from the Object Store, and events from an older writer
// generation that a newer one replaced are skipped. The result is the
// longest gap-free prefix 1..n; events after a gap (un-synced events of a
// crashed writer) are not returned. When session.UID is empty, the uid of
// the newest message on the session's subjects is used.
func Replay(ctx context.Context, js jetstream.JetStream, session SessionRef, opts ...ReadOption) ([]loop.Event, error) {
	res, err := replay(ctx, js, session, readConfig(opts))
	if err != nil {
		return nil, err
	}
	return res.events, nil
}

type replayResult struct {
	events   []loop.Event
	maxGen   uint64
	messages int
}

func replay(ctx context.Context, js jetstream.JetStream, session SessionRef, ro readOptions) (replayResult, error) {
	if err := ValidateSession(session); err != nil {
		return replayResult{}, fmt.Errorf("replay: %w", err)
	}
	cfg := ro.stream
	filter := SessionFilter(cfg.Prefix, session)
	last, err := lastMessage(ctx, js, cfg.Name, filter, ro.fromLeader)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return replayResult{}, nil
	}
	if err != nil {
		return replayResult{}, fmt.Errorf("replay %s: last message: %w", session, err)
	}
	if session.UID == "" {
		env, err := decodeEnvelope(last.Data)
		if err != nil {
			return replayResult{}, fmt.Errorf("replay %s: %w", session, err)
		}
		session.UID = env.Session.UID
	}
	r := newReader(js, session.UID)
	err = r.consume(ctx, cfg, filter, func(env *Envelope, meta *jetstream.MsgMetadata) (bool, error) {
		gen := r.seq.lastGen
		ready := r.seq.add(env)
		for i, e := range ready {
			ev, err := r.resolve(ctx, e)
			if errors.Is(err, errLargeEventLost) {
				// Its bucket was lost without the stream: the event was never
				// stored, as far as a replay can tell. The prefix ends before
				// it, until a writer that resumed from there stores it anew.
				r.seq.unread(ready, i, gen)
				break
			}
			if err != nil {
				return false, err
			}
			r.events = append(r.events, ev)
			gen = e.Gen
		}
		return meta.Sequence.Stream < last.Sequence, nil
	})
	if err != nil {
		return replayResult{}, fmt.Errorf("replay %s: %w", session, err)
	}
	return replayResult{events: r.events, maxGen: r.seq.maxGen, messages: r.seq.messages}, nil
}

// Follow delivers the events of a session with seq >= fromSeq to fn, in seq
// order and without duplicates: first the journal, then live events, until
// ctx ends (it returns ctx.Err()) or fn returns an error (it returns that
// error, or nil for ErrStop). When session.UID is empty, the uid of the
// newest message at call time is followed, or else the first one seen.
func Follow(ctx context.Context, js jetstream.JetStream, session SessionRef, fromSeq uint64, fn func(loop.Event) error, opts ...ReadOption) error {
	ro := readConfig(opts)
	cfg := ro.stream
	if err := ValidateSession(session); err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	filter := SessionFilter(cfg.Prefix, session)
	if session.UID == "" {
		last, err := lastMessage(ctx, js, cfg.Name, filter, ro.fromLeader)
		switch {
		case err == nil:
			env, err := decodeEnvelope(last.Data)
			if err != nil {
				return fmt.Errorf("follow %s: %w", session, err)
			}
			session.UID = env.Session.UID
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("follow %s: last message: %w", session, err)
		}
	}
	r := newReader(js, session.UID)
	err := r.consume(ctx, cfg, filter, func(env *Envelope, _ *jetstream.MsgMetadata) (bool, error) {
		for _, e := range r.seq.add(env) {
			if e.Seq < fromSeq {
				continue
			}
			ev, err := r.resolve(ctx, e)
			if err != nil {
				return false, err
			}
			if err := fn(ev); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if errors.Is(err, ErrStop) {
		return nil
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("follow %s: %w", session, err)
	}
	return nil
}

// reader holds the state of one Replay or Follow.
type reader struct {
	js     jetstream.JetStream
	uid    string
	seq    sequencer
	obs    map[string]jetstream.ObjectStore
	events []loop.Event
	// onEnvelope, if set, sees every envelope, of any incarnation.
	onEnvelope func(*Envelope)
}

func newReader(js jetstream.JetStream, uid string) *reader {
	return &reader{js: js, uid: uid, seq: sequencer{next: 1, pending: map[uint64]*Envelope{}}, obs: map[string]jetstream.ObjectStore{}}
}

// consume runs an ordered consumer from the start of filter and calls fn for
// every envelope of the followed uid until fn returns false or an error.
func (r *reader) consume(ctx context.Context, cfg StreamConfig, filter string, fn func(env *Envelope, meta *jetstream.MsgMetadata) (bool, error)) error {
	cons, err := r.js.OrderedConsumer(ctx, cfg.Name, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("next message: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("message metadata: %w", err)
		}
		env, err := decodeEnvelope(msg.Data())
		if err != nil {
			return fmt.Errorf("stream sequence %d: %w", meta.Sequence.Stream, err)
		}
		if r.onEnvelope != nil {
			r.onEnvelope(env)
		}
		if r.uid == "" {
			r.uid = env.Session.UID
		}
		more := true
		if env.Session.UID == r.uid {
			if more, err = fn(env, meta); err != nil {
				return err
			}
		} else {
			more, err = fn(nil, meta)
			if err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
	}
}

// resolve turns an envelope into its event, fetching a large one.
func (r *reader) resolve(ctx context.Context, env *Envelope) (loop.Event, error) {
	if env.Ref == nil {
		return env.Event(), nil
	}
	ref := env.Ref
	obs, ok := r.obs[ref.Bucket]
	if !ok {
		var err error
		if obs, err = r.js.ObjectStore(ctx, ref.Bucket); err != nil {
			return loop.Event{}, fmt.Errorf("event %s: open object store %s: %w", env.ID, ref.Bucket, lostIfNotFound(err))
		}
		r.obs[ref.Bucket] = obs
	}
	data, err := obs.GetBytes(ctx, ref.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) && bucketMadeAfter(ctx, obs, env.Time) {
		err = fmt.Errorf("%w: %w", errLargeEventLost, err)
	}
	if err != nil {
		return loop.Event{}, fmt.Errorf("event %s: get large event %s: %w", env.ID, ref.Object, err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != ref.SHA256 {
		return loop.Event{}, fmt.Errorf("event %s: large event %s: digest mismatch", env.ID, ref.Object)
	}
	full, err := decodeEnvelope(data)
	if err != nil {
		return loop.Event{}, fmt.Errorf("event %s: large event: %w", env.ID, err)
	}
	if full.ID != env.ID || full.Seq != env.Seq {
		return loop.Event{}, fmt.Errorf("event %s: large event %s holds event %s", env.ID, ref.Object, full.ID)
	}
	return full.Event(), nil
}

// errLargeEventLost says a large event's object is lost: its bucket does not
// exist, or was made after the event (deleted, or lost with the server's
// store and made anew) while the stream kept the event's reference.
var errLargeEventLost = errors.New("the large event's object is gone")

// lostIfNotFound marks err with errLargeEventLost when it says the bucket
// does not exist (a stream lookup, answered by the stream's leader).
func lostIfNotFound(err error) error {
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%w: %w", errLargeEventLost, err)
	}
	return err
}

// bucketMadeAfter reports whether the bucket of obs was made after t (the
// time of an event whose object it lacks): made anew, so the object is lost.
// An object not found in a bucket older than the event is not taken for
// lost: reads may be served by a replica that has not caught up yet (the
// bucket allows direct gets), so the replay fails and is tried again, as
// before. The bucket's creation time comes from its leader.
func bucketMadeAfter(ctx context.Context, obs jetstream.ObjectStore, t time.Time) bool {
	st, err := obs.Status(ctx)
	if err != nil {
		return false
	}
	bs, ok := st.(*jetstream.ObjectBucketStatus)
	return ok && bs.StreamInfo() != nil && bs.StreamInfo().Created.After(t)
}

// sequencer puts envelopes in seq order, drops duplicates and prefers the
// highest writer generation for each seq (see Envelope.Gen).
type sequencer struct {
	next     uint64
	lastGen  uint64
	pending  map[uint64]*Envelope
	maxGen   uint64
	messages int
}

// add takes one envelope (nil for a message of another incarnation) and
// returns the envelopes that became deliverable, in order.
func (s *sequencer) add(env *Envelope) []*Envelope {
	if env == nil {
		return nil
	}
	s.messages++
	s.maxGen = max(s.maxGen, env.Gen)
	if env.Seq < s.next {
		return nil
	}
	if cur, ok := s.pending[env.Seq]; !ok || env.Gen > cur.Gen {
		s.pending[env.Seq] = env
	}
	var ready []*Envelope
	for {
		e, ok := s.pending[s.next]
		if !ok || e.Gen < s.lastGen {
			return ready
		}
		delete(s.pending, s.next)
		ready = append(ready, e)
		s.lastGen = e.Gen
		s.next++
	}
}

// unread takes back ready[i:] of what add returned: ready[i] is dropped, as
// if it had never been received, and the rest wait again; gen is the
// generation of the envelope delivered before ready[i]. A later envelope for
// ready[i]'s seq (a writer that resumed before it) is then delivered.
func (s *sequencer) unread(ready []*Envelope, i int, gen uint64) {
	s.next = ready[i].Seq
	s.lastGen = gen
	for _, e := range ready[i+1:] {
		s.pending[e.Seq] = e
	}
}

// CheckSequence returns an error naming the first gap, duplicate or
// reordering in events, whose seqs must be 1, 2, 3, ... of one session.
func CheckSequence(events []loop.Event) error {
	for i, ev := range events {
		want := uint64(i + 1)
		if ev.Seq != want {
			return fmt.Errorf("check sequence: event %d has seq %d, want %d", i, ev.Seq, want)
		}
		if ev.SessionID != events[0].SessionID {
			return fmt.Errorf("check sequence: event %d belongs to session %q, not %q", i, ev.SessionID, events[0].SessionID)
		}
	}
	return nil
}
