package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// Defaults of PublisherOptions and JournalOptions.
const (
	DefaultAckTimeout = 5 * time.Second
	DefaultWindow     = 256
	DefaultRetryMin   = 100 * time.Millisecond
	DefaultRetryMax   = 5 * time.Second
)

// headroom is kept free below the payload limit for headers and protocol.
const headroom = 1024

// PublisherOptions configures a Publisher.
type PublisherOptions struct {
	// Stream is the stream and bucket configuration (defaults filled in).
	Stream StreamConfig
	// AckTimeout bounds the wait for one publish ack before it is retried.
	// Default 5s.
	AckTimeout time.Duration
	// OnStreamRestored, if set, is called each time a journal found the
	// stream gone (a server that came back without its store) and made it
	// again: the events stored before are lost.
	OnStreamRestored func()
}

// Publisher owns the JetStream context shared by the journals of all
// sessions on one connection.
type Publisher struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	cfg        StreamConfig
	ackTimeout time.Duration

	mu  sync.Mutex
	obs jetstream.ObjectStore

	// restoring is held (a token in a 1-slot channel) while restoreStream
	// looks for the stream and makes it again; a journal that finds it
	// held does not wait for it.
	restoring chan struct{}
	// onRestored is PublisherOptions.OnStreamRestored.
	onRestored func()

	// afterFence, when set (by tests), runs in OpenJournal between the
	// fence and the replay.
	afterFence func()
}

// NewPublisher returns a Publisher over nc. It does not create the stream;
// call EnsureStream once at start.
func NewPublisher(nc *nats.Conn, opts PublisherOptions) (*Publisher, error) {
	if nc == nil {
		return nil, errors.New("new publisher: nil connection")
	}
	if err := opts.Stream.Validate(); err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	return &Publisher{nc: nc, js: js, cfg: opts.Stream.withDefaults(), ackTimeout: opts.AckTimeout,
		restoring: make(chan struct{}, 1), onRestored: opts.OnStreamRestored}, nil
}

// JetStream returns the JetStream context of the publisher (for Replay and
// Follow).
func (p *Publisher) JetStream() jetstream.JetStream { return p.js }

// StreamConfig returns the configuration with defaults filled in.
func (p *Publisher) StreamConfig() StreamConfig { return p.cfg }

// EnsureStream creates or updates the stream and the large-event bucket.
func (p *Publisher) EnsureStream(ctx context.Context) error {
	return EnsureStream(ctx, p.js, p.cfg)
}

// restoreTimeout bounds the requests of one restoreStream.
const restoreTimeout = 5 * time.Second

// errRestoring is restoreStream's answer while another journal runs it.
var errRestoring = errors.New("another journal is looking for the events stream")

// ErrStreamLost is what PublisherOptions.OnStreamRestored is told of: the
// stream was gone, and what it held is lost.
var ErrStreamLost = errors.New("the events stream or its large-event bucket was gone (a NATS server that came back without its store, or deleted)")

// restoreStream makes the stream and the large-event bucket again when the
// server answers that the stream, or the bucket, does not exist: a server
// that came back without its store, a stream or bucket deleted by hand, or
// a bucket never made (see below). Without it a running
// session's journal would wait for a manager restart (the only other
// EnsureStream). Only on that answer: a stream that does not respond (a
// server restarting, JetStream not ready) is waited for. It returns nil
// when the stream exists (made again, or found: another journal made it
// first); what the lost store held stays lost.
//
// It never waits long: one journal looks at a time, the others go on to
// their backoff at once; and its requests are bounded by restoreTimeout
// whatever the caller's deadline (a request sent while the connection
// moves to another server of a cluster may never be answered; the first
// version waited for it with a token every journal queued for, and a
// stream leader's failover stopped every session).
func (p *Publisher) restoreStream(ctx context.Context) error {
	select {
	case p.restoring <- struct{}{}:
	default:
		return errRestoring
	}
	defer func() { <-p.restoring }()
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	_, err := p.js.Stream(ctx, p.cfg.Name)
	if err == nil {
		// The stream is there; the bucket may not be. EnsureStream makes it
		// after the stream, so a manager that died between the two, or a
		// request that failed there, left the stream without it.
		_, err = p.js.ObjectStore(ctx, p.cfg.LargeBucket)
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	if err := p.EnsureStream(ctx); err != nil {
		return fmt.Errorf("make the lost stream %s or bucket %s again: %w", p.cfg.Name, p.cfg.LargeBucket, err)
	}
	p.mu.Lock()
	p.obs = nil // the bucket was made again too
	p.mu.Unlock()
	if p.onRestored != nil {
		p.onRestored()
	}
	return nil
}

// objectStore returns the large-event bucket, looked up once.
func (p *Publisher) objectStore(ctx context.Context) (jetstream.ObjectStore, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.obs != nil {
		return p.obs, nil
	}
	obs, err := p.js.ObjectStore(ctx, p.cfg.LargeBucket)
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", p.cfg.LargeBucket, err)
	}
	p.obs = obs
	return obs, nil
}

// payloadLimit is the largest envelope published inline.
func (p *Publisher) payloadLimit() int {
	limit := int(p.nc.MaxPayload())
	if m := int(p.cfg.MaxMsgSize); m > 0 && (limit <= 0 || m < limit) {
		limit = m
	}
	if limit <= 0 {
		limit = 1 << 20
	}
	return limit - headroom
}

// JournalOptions configures one session's Journal.
type JournalOptions struct {
	// Parent is the parent session of a subagent, nil for a root session.
	Parent *SessionRef
	// Redactor is applied to every event before it is published. Nil applies
	// only the sensitive-name patterns.
	Redactor *Redactor
	// Window is the number of un-acked publishes in flight; Append blocks
	// while it is full. Default 256.
	Window int
	// Generation is the writer generation (see Envelope.Gen). OpenJournal
	// sets it; leave 0 for a new session.
	Generation uint64
	// OnStateChange is called, from the goroutine calling Append or Sync,
	// whenever the journal becomes unavailable (available false and the
	// error) or available again. It must not block.
	OnStateChange func(available bool, err error)
	// RetryMin and RetryMax bound the exponential backoff between retries.
	// Defaults 100ms and 5s.
	RetryMin, RetryMax time.Duration
}

// Journal publishes the events of one session; it implements loop.Journal.
// Append calls must be made in seq order (the loop makes them under its
// emitter lock, from several goroutines); Sync may run concurrently with
// Append and waits only for the events appended before it was called. All
// methods are safe for concurrent use.
type Journal struct {
	p       *Publisher
	session SessionRef
	opts    JournalOptions
	// fence is the stream sequence of this writer's fence message (0: not
	// fenced, a journal from NewJournal); every publish expects it to be
	// the last message on the fence subject, so once another writer opened
	// the journal (and fenced it anew) this one can no longer append.
	fence uint64
	// drain is held (a token in a 1-slot channel, so waiting honours ctx)
	// by the one goroutine that waits for acks and retries failures.
	drain chan struct{}
	// publish is held (a token in a 1-slot channel) by Append, and by Sync
	// while it flushes a held delta, so events go out in seq order.
	publish chan struct{}
	// deltas redacts delta streams across deltas; guarded by publish.
	deltas *deltaRedactor

	mu       sync.Mutex
	pending  []*entry // un-acked, in seq order; only the drainer removes
	appended uint64   // entries ever appended
	acked    uint64   // entries ever acknowledged
	lastSeq  uint64
	backoff  time.Duration
	avail    bool
	lastErr  error
}

var _ loop.Journal = (*Journal)(nil)

type entry struct {
	seq uint64
	msg *nats.Msg
	fut jetstream.PubAckFuture // nil when it must be (re)published
	err error
}

// NewJournal returns the Journal of a new session (or of a resumed one when
// opts.Generation and start are set by OpenJournal). startSeq is the last
// seq already journaled (0 for a new session).
func (p *Publisher) NewJournal(session SessionRef, startSeq uint64, opts JournalOptions) (*Journal, error) {
	if err := checkJournal(session, opts); err != nil {
		return nil, fmt.Errorf("new journal: %w", err)
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	return &Journal{p: p, session: session, opts: opts, drain: make(chan struct{}, 1),
		publish: make(chan struct{}, 1), deltas: newDeltaRedactor(opts.Redactor),
		lastSeq: startSeq, backoff: opts.RetryMin, avail: true}, nil
}

func checkJournal(session SessionRef, opts JournalOptions) error {
	if err := ValidateSession(session); err != nil {
		return err
	}
	if session.UID == "" {
		return errors.New("session uid is empty")
	}
	if opts.Parent != nil {
		if err := ValidateSession(*opts.Parent); err != nil {
			return fmt.Errorf("parent: %w", err)
		}
	}
	return nil
}

// OpenJournal replays the journal of a session and returns a Journal that
// continues it, with the replayed events (for loop.Restore). The new
// Journal's generation is above every generation found in the stream, so
// un-synced messages of a crashed writer can never shadow its events.
//
// The fence comes first and the replay after it: from the fence on the
// server refuses every publish of an earlier writer (a replica frozen past
// its claim that wakes up), so the replay holds every event that writer got
// in. Replayed first, a stale writer's events could land between the replay
// and the fence, at seqs this writer then reuses: readers keep the first of
// two events of one seq, so the journal would splice the two writers'
// histories (a tool call's end without its start).
func (p *Publisher) OpenJournal(ctx context.Context, session SessionRef, opts JournalOptions) (*Journal, []loop.Event, error) {
	if err := checkJournal(session, opts); err != nil {
		return nil, nil, fmt.Errorf("open journal: %w", err)
	}
	fence, err := p.putFence(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	if p.afterFence != nil {
		p.afterFence()
	}
	res, err := replay(ctx, p.js, session, readOptions{stream: p.cfg, fromLeader: true})
	if err != nil {
		return nil, nil, err
	}
	if res.messages > 0 {
		opts.Generation = res.maxGen + 1
	}
	var last uint64
	if n := len(res.events); n > 0 {
		last = res.events[n-1].Seq
	}
	j, err := p.NewJournal(session, last, opts)
	if err != nil {
		return nil, nil, err
	}
	j.fence = fence
	return j, res.events, nil
}

// ErrFenced is returned (and given to OnStateChange) once another writer
// opened the session's journal after this one: this writer must stop at
// once; the other resumes the session from the journal.
var ErrFenced = errors.New("journal fenced: another writer opened this session's journal")

// putFence publishes this writer's fence anew (its first one is gone past
// the stream's retention).
func (j *Journal) putFence(ctx context.Context) error {
	fence, err := j.p.putFence(ctx, j.session)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.fence = fence
	j.mu.Unlock()
	return nil
}

// putFence publishes a writer's fence, a message on the session's fence
// subject whose stream sequence (returned) every later publish of that
// writer expects to be the subject's last (JetStream's expected last
// sequence per subject). Only its sequence counts: its body is empty.
func (p *Publisher) putFence(ctx context.Context, session SessionRef) (uint64, error) {
	ack, err := p.js.Publish(ctx, FenceSubject(p.cfg.Prefix, session), nil, jetstream.WithExpectStream(p.cfg.Name))
	if errors.Is(err, jetstream.ErrNoStreamResponse) && p.restoreStream(ctx) == nil {
		ack, err = p.js.Publish(ctx, FenceSubject(p.cfg.Prefix, session), nil, jetstream.WithExpectStream(p.cfg.Name))
	}
	if err != nil {
		return 0, fmt.Errorf("fence the journal of %s/%s: %w", session.Namespace, session.Name, err)
	}
	return ack.Sequence, nil
}

// windowLocked is how many publishes may be in flight. A replicated stream
// checks an expected last sequence per subject only while no other message
// checking the same subject is being proposed, and refuses the others with
// a constant "wrong last sequence" error (nats-server's clustered batching
// rule): so a fenced journal on a replicated stream has one publish in
// flight at a time, each waiting for its ack (docs/events.md).
func (j *Journal) windowLocked() int {
	if j.fence != 0 && j.p.cfg.Replicas > 1 {
		return 1
	}
	return j.opts.Window
}

// fenceHeaders makes msg expect this writer's fence to be the last message
// on the fence subject.
func (j *Journal) fenceHeaders(msg *nats.Msg, fence uint64) {
	if fence == 0 {
		return
	}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(fence, 10))
	msg.Header.Set(expectedLastSubjSeqSubjHeader, FenceSubject(j.p.cfg.Prefix, j.session))
}

// expectedLastSubjSeqSubjHeader names the subject whose last sequence
// ExpectedLastSubjSeqHeader is about (nats-server 2.11+).
const expectedLastSubjSeqSubjHeader = "Nats-Expected-Last-Subject-Sequence-Subject"

// fenced reports whether err is the server refusing a publish because the
// fence subject's last message is not this writer's fence, and whether
// that subject is empty instead (the fence message is gone, e.g. past the
// stream's retention). A refusal that does not say what the server found
// (replicated streams answer with a constant error) counts as fenced here;
// waitUntil first asks falseRefusal whether the fence is in fact still ours.
func fenced(err error) (gone, ok bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || (apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence &&
		apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return false, false
	}
	d := apiErr.Description
	n, perr := strconv.ParseUint(strings.TrimSpace(d[strings.LastIndex(d, " ")+1:]), 10, 64)
	return perr == nil && n == 0, true
}

// falseRefusal reports whether err, a refusal of this writer's fence
// check, is one a replicated stream gives without saying what it found
// (JSErrCodeStreamWrongLastSequenceConstant) while the fence subject's last
// message is still this writer's fence. When that cannot be read, the
// refusal stands.
func (j *Journal) falseRefusal(ctx context.Context, err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
		return false
	}
	j.mu.Lock()
	fence := j.fence
	j.mu.Unlock()
	actx, cancel := context.WithTimeout(ctx, j.p.ackTimeout)
	defer cancel()
	last, serr := lastMessage(actx, j.p.js, j.p.cfg.Name, FenceSubject(j.p.cfg.Prefix, j.session), true)
	return serr == nil && last.Sequence == fence
}

// Available reports whether the last publish attempt succeeded, and the
// last error otherwise.
func (j *Journal) Available() (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.avail, j.lastErr
}

// Pending returns the number of appended events not yet acknowledged.
func (j *Journal) Pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending)
}

// Append publishes ev asynchronously. It blocks while the in-flight window is
// full (retrying failed publishes) and, for an event too large for one
// message, until the event is stored in the Object Store. It returns an error
// only when ctx ends or the event cannot ever be published.
//
// A delta (ASSISTANT_TEXT_DELTA, TOOL_CALL_OUTPUT_DELTA) whose text ends
// with what may be the start of a secret is held: it is published, with
// those bytes cut off, by the next Append (or Sync), and the bytes go out
// redacted with the stream's next delta, or in the held delta itself when
// any other event comes next (see deltaRedactor). An error publishing the
// held delta is returned by that later call, and ev is then not appended.
func (j *Journal) Append(ctx context.Context, ev loop.Event) error {
	select {
	case j.publish <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("append event %d: %w", ev.Seq, ctx.Err())
	}
	defer func() { <-j.publish }()
	j.mu.Lock()
	last := max(j.lastSeq, j.deltas.heldSeq())
	j.mu.Unlock()
	if ev.Seq <= last {
		return fmt.Errorf("append event: seq %d is not after %d", ev.Seq, last)
	}
	for _, e := range j.deltas.next(ev) {
		if err := j.append(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// append publishes one event, in seq order.
func (j *Journal) append(ctx context.Context, ev loop.Event) error {
	j.mu.Lock()
	last := j.lastSeq
	j.mu.Unlock()
	if ev.Seq <= last {
		return fmt.Errorf("append event: seq %d is not after %d", ev.Seq, last)
	}
	env := Envelope{
		V:       EnvelopeVersion,
		ID:      EventID(j.session.UID, ev.Seq),
		Session: j.session,
		Parent:  j.opts.Parent,
		Kind:    ev.Kind,
		Time:    ev.Time.UTC(),
		Seq:     ev.Seq,
		Gen:     j.opts.Generation,
		Data:    ev.Data,
	}
	data, err := json.Marshal(&env)
	if err != nil {
		return fmt.Errorf("append event %d: encode: %w", ev.Seq, err)
	}
	if data, err = j.opts.Redactor.JSON(data); err != nil {
		return fmt.Errorf("append event %d: %w", ev.Seq, err)
	}
	msgID := MsgID(j.session.UID, ev.Seq, j.opts.Generation)
	if len(data) > j.p.payloadLimit() {
		if data, err = j.storeLarge(ctx, &env, msgID, data); err != nil {
			return fmt.Errorf("append event %d: %w", ev.Seq, err)
		}
	}
	// Make room first, so a failed wait leaves the event un-appended.
	if err := j.waitUntil(ctx, func() bool { return len(j.pending) < j.windowLocked() }); err != nil {
		return fmt.Errorf("append event %d: %w", ev.Seq, err)
	}
	msg := &nats.Msg{
		Subject: SessionSubject(j.p.cfg.Prefix, j.session, ev.Kind),
		Data:    data,
		Header:  nats.Header{},
	}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	msg.Header.Set(jetstream.ExpectedStreamHeader, j.p.cfg.Name)
	e := &entry{seq: ev.Seq, msg: msg}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.fenceHeaders(msg, j.fence)
	if ev.Seq <= j.lastSeq {
		return fmt.Errorf("append event: seq %d is not after %d", ev.Seq, j.lastSeq)
	}
	j.publishLocked(e)
	j.pending = append(j.pending, e)
	j.appended++
	j.lastSeq = ev.Seq
	return nil
}

// Sync blocks until every event appended before the call is acknowledged
// by the server, re-publishing failed ones with the same message id, until
// ctx ends.
func (j *Journal) Sync(ctx context.Context) error {
	select {
	case j.publish <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("sync journal: %w", ctx.Err())
	}
	var err error
	if j.deltas.held != nil {
		err = j.append(ctx, j.deltas.flush())
	}
	<-j.publish
	if err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	j.mu.Lock()
	target := j.appended
	j.mu.Unlock()
	if err := j.waitUntil(ctx, func() bool { return j.acked >= target }); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// storeLarge puts the envelope in the Object Store, retrying until it
// succeeds or ctx ends, and returns the reference envelope to publish.
func (j *Journal) storeLarge(ctx context.Context, env *Envelope, name string, data []byte) ([]byte, error) {
	for {
		err := j.putObject(ctx, name, data)
		if err == nil {
			j.succeeded()
			break
		}
		if err := j.fail(ctx, err); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(data)
	ref := Envelope{
		V: env.V, ID: env.ID, Session: env.Session, Parent: env.Parent, Kind: env.Kind,
		Time: env.Time, Seq: env.Seq, Gen: env.Gen,
		Ref: &LargeRef{Bucket: j.p.cfg.LargeBucket, Object: name, Size: len(data), SHA256: hex.EncodeToString(sum[:])},
	}
	out, err := json.Marshal(&ref)
	if err != nil {
		return nil, fmt.Errorf("encode reference: %w", err)
	}
	return out, nil
}

func (j *Journal) putObject(ctx context.Context, name string, data []byte) error {
	actx, cancel := context.WithTimeout(ctx, 4*j.p.ackTimeout)
	defer cancel()
	obs, err := j.p.objectStore(actx)
	if err == nil {
		if _, err = obs.PutBytes(actx, name, data); err != nil {
			err = fmt.Errorf("store large event %s: %w", name, err)
		}
	}
	if err != nil && bucketGone(err) {
		// Gone with the server's store, or alone? Made again, the put after
		// the backoff goes through.
		if rerr := j.p.restoreStream(ctx); rerr != nil {
			err = fmt.Errorf("%w (looking for the bucket: %w)", err, rerr)
		}
	}
	return err
}

// bucketGone reports whether err may say the large-event bucket is gone:
// not found when it is looked up, no stream behind a put to the handle
// looked up before.
func bucketGone(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// publishLocked sends e; a send error leaves e.fut nil for the next retry.
func (j *Journal) publishLocked(e *entry) {
	fut, err := j.p.js.PublishMsgAsync(e.msg)
	e.fut, e.err = fut, err
}

// waitUntil waits for acks, retrying failed publishes, until done (called
// with j.mu held) reports true or ctx ends.
func (j *Journal) waitUntil(ctx context.Context, done func() bool) error {
	j.mu.Lock()
	ok := done()
	j.mu.Unlock()
	if ok {
		return nil
	}
	select {
	case j.drain <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-j.drain }()
	for {
		j.mu.Lock()
		if done() {
			j.mu.Unlock()
			return nil
		}
		e := j.pending[0] // done() is false, so something is pending
		fut := e.fut
		j.mu.Unlock()
		var err error
		if fut != nil {
			select {
			case <-fut.Ok():
				j.mu.Lock()
				j.pending[0] = nil
				j.pending = j.pending[1:]
				j.acked++
				j.mu.Unlock()
				j.succeeded()
				continue
			case err = <-fut.Err():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		j.mu.Lock()
		if fut != nil {
			e.fut, e.err = nil, err
		}
		err = e.err
		j.mu.Unlock()
		if gone, ok := fenced(err); ok && !gone && j.falseRefusal(ctx, err) {
			// The fence is still ours: another publish checking the fence
			// subject was being proposed at the same moment (a replicated
			// stream refuses such overlaps). Not a takeover: try again.
		} else if ok {
			if !gone {
				if j.opts.OnStateChange != nil {
					j.opts.OnStateChange(false, ErrFenced)
				}
				return fmt.Errorf("publish event %d: %w (%w)", e.seq, ErrFenced, err)
			}
			// The fence message itself is gone (retention): fence anew
			// and publish again; a writer that took over would have left
			// its own fence there.
			if ferr := j.putFence(ctx); ferr != nil {
				err = ferr
			} else {
				j.mu.Lock()
				for _, p := range j.pending {
					j.fenceHeaders(p.msg, j.fence)
				}
				j.mu.Unlock()
			}
		} else if isPermanent(err) {
			return fmt.Errorf("publish event %d: %w: %w", e.seq, errPermanent, err)
		} else if errors.Is(err, jetstream.ErrNoStreamResponse) {
			// Gone with the server's store? Made again, the publish after
			// the backoff goes through (a fenced journal then finds its
			// fence gone and fences anew).
			if rerr := j.p.restoreStream(ctx); rerr != nil {
				err = fmt.Errorf("%w (looking for the stream: %w)", err, rerr)
			}
		}
		if err := j.fail(ctx, fmt.Errorf("publish event %d: %w", e.seq, err)); err != nil {
			return err
		}
		j.republishFailed()
	}
}

// republishFailed re-publishes, in order, every pending entry whose publish
// failed; entries still waiting for their ack keep their future.
func (j *Journal) republishFailed() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, f := range j.pending {
		if f.fut != nil {
			select {
			case err := <-f.fut.Err():
				f.fut, f.err = nil, err
			default:
			}
		}
		if f.fut == nil {
			j.publishLocked(f)
		}
	}
}

// fail records err, reports the journal unavailable and waits the backoff.
func (j *Journal) fail(ctx context.Context, err error) error {
	j.mu.Lock()
	changed := j.avail
	j.avail, j.lastErr = false, err
	wait := j.backoff
	j.backoff = min(2*j.backoff, j.opts.RetryMax)
	j.mu.Unlock()
	if changed && j.opts.OnStateChange != nil {
		j.opts.OnStateChange(false, err)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("journal unavailable: %w (last error: %w)", ctx.Err(), err)
	}
}

func (j *Journal) succeeded() {
	j.mu.Lock()
	changed := !j.avail
	j.avail, j.lastErr = true, nil
	j.backoff = j.opts.RetryMin
	j.mu.Unlock()
	if changed && j.opts.OnStateChange != nil {
		j.opts.OnStateChange(true, nil)
	}
}

// isPermanent reports errors that re-publishing cannot fix: a request the
// server rejects as invalid, or a message over the payload limit.
func isPermanent(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 400
	}
	return false
}
