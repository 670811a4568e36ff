package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
)

type stopMode int

const (
	stopNone   stopMode = iota
	stopAbort           // close the loop; the journal records SESSION_END
	stopDetach          // detach the journal, then close: resumable later
	stopFail            // close the loop and report Failed with failReason
)

// cleanupTimeout bounds environment cleanup and the final drain of events.
const cleanupTimeout = 10 * time.Second

// session is the runner of one AgentSession.
type session struct {
	r      *Runner
	obj    *agentsv1.AgentSession
	pod    string
	key    types.NamespacedName
	log    logr.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu            sync.Mutex
	prog          Progress
	known         map[string]bool
	queue         []agentsv1.Message
	mode          stopMode
	failReason    string
	failMessage   string
	lastNotify    time.Time
	notifyPending bool
	// redactor removes the session's API key from the texts progress keeps
	// (result, error), as the journal does from events; nil until the key
	// is known, and when there is none.
	redactor *events.Redactor
}

func newSession(r *Runner, obj *agentsv1.AgentSession, pod string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		r: r, obj: obj, pod: pod,
		key: types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name},
		log: r.opts.Log.WithValues("agentSession", obj.Namespace+"/"+obj.Name),
		ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1),
		known: map[string]bool{},
	}
	s.prog.JournalAvailable = true
	for _, n := range obj.Status.MessagesDelivered {
		s.known[n] = true
		s.prog.Delivered = append(s.prog.Delivered, n)
	}
	if t := obj.Status.StartTime; t != nil {
		s.prog.StartTime = t.Time
	}
	return s
}

// offer queues the messages not seen before.
func (s *session) offer(msgs []agentsv1.Message) {
	s.mu.Lock()
	added := false
	for _, m := range msgs {
		if !s.known[m.Name] {
			s.known[m.Name] = true
			s.queue = append(s.queue, m)
			added = true
		}
	}
	s.mu.Unlock()
	if added {
		s.signal()
	}
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *session) snapshot() Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prog.clone()
}

// stop asks the goroutine to end; the first reason wins.
func (s *session) stop(mode stopMode) {
	s.mu.Lock()
	if s.mode == stopNone {
		s.mode = mode
		if mode == stopAbort {
			s.prog.Phase, s.prog.Reason = agentsv1.PhaseAborted, agentsv1.ReasonAborted
		}
	}
	s.mu.Unlock()
	s.cancel()
}

func (s *session) fail(reason, msg string) {
	s.mu.Lock()
	if s.mode == stopNone {
		s.mode = stopFail
		if s.redactor != nil {
			msg = s.redactor.String(msg)
		}
		s.failReason, s.failMessage = reason, msg
		s.prog.Phase, s.prog.Reason, s.prog.Error = agentsv1.PhaseFailed, reason, msg
	}
	s.mu.Unlock()
	s.cancel()
	s.notify(true)
}

// notify tells the controller about progress: at once when urgent, else at
// most once per NotifyInterval (a trailing notification is scheduled).
func (s *session) notify(urgent bool) {
	interval := s.r.opts.NotifyInterval
	s.mu.Lock()
	now := s.r.opts.Now()
	if urgent || now.Sub(s.lastNotify) >= interval {
		s.lastNotify = now
		s.mu.Unlock()
		s.r.opts.Notify(s.key)
		return
	}
	if !s.notifyPending {
		s.notifyPending = true
		time.AfterFunc(interval-now.Sub(s.lastNotify), func() {
			s.mu.Lock()
			s.notifyPending = false
			s.lastNotify = s.r.opts.Now()
			s.mu.Unlock()
			s.r.opts.Notify(s.key)
		})
	}
	s.mu.Unlock()
}

// run is the goroutine of the session.
func (s *session) run() {
	defer func() {
		s.mu.Lock()
		s.prog.Done = true
		s.mu.Unlock()
		close(s.done)
		s.notify(true)
	}()
	ctx := s.ctx
	if d := s.obj.Spec.Limits.Deadline; d != nil {
		start := s.r.opts.Now()
		if t := s.obj.Status.StartTime; t != nil {
			start = t.Time
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(d.Duration))
		defer cancel()
	}
	sess, dj, replayed, err := s.build(ctx)
	if err != nil {
		s.buildFailed(ctx, err)
		return
	}
	s.restored(replayed)
	consumed := make(chan struct{})
	go s.consume(sess.Events(), consumed)
	s.drive(ctx, sess, replayed)
	s.finish(sess, dj, consumed)
}

// build creates the LLM client, environment, profile, journal and loop.
func (s *session) build(ctx context.Context) (*loop.Session, *detachable, []loop.Event, error) {
	cc, err := clientConfig(ctx, s.r.opts.Reader, s.obj)
	if err != nil {
		return nil, nil, nil, err
	}
	llmc, err := s.r.opts.Clients(ctx, cc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	prof, err := buildProfile(&s.obj.Spec)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	env, err := s.r.opts.Envs(ctx, s.obj, s.pod)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open workspace environment: %w", err)
	}
	j, replayed, err := s.openJournal(ctx, cc.APIKey)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(replayed) == 0 && s.obj.Status.LastEventSequence > 0 {
		// Starting over would run the task (and its side effects) a second time.
		return nil, nil, nil, fmt.Errorf("%w (status recorded %d events): the session cannot be resumed",
			ErrJournalLost, s.obj.Status.LastEventSequence)
	}
	dj := &detachable{j: j}
	opts := []loop.Option{
		loop.WithConfig(loopConfig(&s.obj.Spec)),
		loop.WithJournal(dj),
		loop.WithID(string(s.obj.UID)),
	}
	if d := s.obj.Spec.Depth; d != nil {
		opts = append(opts, loop.WithDepth(int(*d)))
	}
	if len(replayed) > 0 {
		opts = append(opts, loop.WithRestore(replayed))
	}
	if p := toolPolicy(&s.obj.Spec); p != nil {
		opts = append(opts, loop.WithToolPolicy(p))
	}
	if s.r.opts.Client != nil {
		opts = append(opts, loop.WithSubagentSpawner(&childSpawner{c: s.r.opts.Client, r: s.r.opts.Reader, parent: s.obj, watch: s.r.children}))
	}
	sess, err := loop.New(prof, scopeEnv(env, s.obj), llmc, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("new loop session: %w", err)
	}
	return sess, dj, replayed, nil
}

// openJournal retries until the journal opens or ctx ends; the session waits
// with JournalAvailable false meanwhile.
func (s *session) openJournal(ctx context.Context, apiKey string) (*events.Journal, []loop.Event, error) {
	ref := events.SessionRef{Namespace: s.obj.Namespace, Name: s.obj.Name, UID: string(s.obj.UID)}
	opts := events.JournalOptions{OnStateChange: s.journalState}
	if apiKey != "" {
		opts.Redactor = events.NewRedactor(apiKey)
		s.mu.Lock()
		s.redactor = opts.Redactor
		s.mu.Unlock()
	}
	if p := s.obj.Spec.ParentRef; p != nil {
		opts.Parent = &events.SessionRef{Namespace: s.obj.Namespace, Name: p.Name, UID: p.UID}
	}
	backoff := 100 * time.Millisecond
	for {
		j, replayed, err := s.r.opts.Journals.OpenJournal(ctx, ref, opts)
		if err == nil {
			s.journalState(true, nil)
			return j, replayed, nil
		}
		s.journalState(false, err)
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("open journal: %w", err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *session) journalState(available bool, err error) {
	s.mu.Lock()
	s.prog.JournalAvailable = available
	s.prog.JournalError = ""
	if err != nil {
		s.prog.JournalError = err.Error()
	}
	s.mu.Unlock()
	s.notify(true)
}

func (s *session) buildFailed(ctx context.Context, err error) {
	reason := agentsv1.ReasonFailed
	switch {
	case errors.Is(err, ErrConfig):
		reason = agentsv1.ReasonConfigError
	case ctx.Err() != nil:
		s.stoppedByContext(ctx)
		return
	}
	s.log.Error(err, "Session could not start")
	s.fail(reason, err.Error())
}

// stoppedByContext records why ctx ended when nobody called stop.
func (s *session) stoppedByContext(ctx context.Context) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		s.fail(agentsv1.ReasonDeadlineExceeded, "spec.limits.deadline passed")
	}
}

// restored folds the replayed events into progress and marks messages the
// journal already holds as delivered.
func (s *session) restored(replayed []loop.Event) {
	s.mu.Lock()
	for _, ev := range replayed {
		applyEvent(&s.prog, ev)
	}
	delivered := map[string]bool{}
	for _, n := range s.prog.Delivered {
		delivered[n] = true
	}
	found := deliveredInJournal(s.obj.Spec.Messages, replayed, delivered)
	for _, n := range found {
		s.known[n] = true
		s.prog.Delivered = append(s.prog.Delivered, n)
	}
	s.mu.Unlock()
	s.notify(true)
}

// consume folds live events into progress and enforces the token budget.
func (s *session) consume(evs <-chan loop.Event, done chan<- struct{}) {
	defer close(done)
	budget := s.obj.Spec.Limits.TokenBudget
	for ev := range evs {
		s.mu.Lock()
		if s.mode == stopDetach {
			s.mu.Unlock()
			continue // not journaled: status must not run ahead of the journal
		}
		before := s.prog.Phase
		applyEvent(&s.prog, redactEvent(s.redactor, ev))
		changed := s.prog.Phase != before
		over := budget > 0 && s.prog.Usage.Total() > budget
		s.mu.Unlock()
		if over {
			s.fail(agentsv1.ReasonTokenBudgetExceeded,
				fmt.Sprintf("token budget of %d exceeded", budget))
		}
		s.notify(changed)
	}
}

// redactEvent removes r's secrets from the texts of ev that progress keeps.
// Live events reach the runner before the journal redacts its copy; the
// status must not show what the journal hides.
func redactEvent(r *events.Redactor, ev loop.Event) loop.Event {
	if r == nil {
		return ev
	}
	ev.Data.Text = r.String(ev.Data.Text)
	ev.Data.Error = r.String(ev.Data.Error)
	return ev
}

// drive submits the prompt and the messages, one input at a time, until the
// session must stop.
func (s *session) drive(ctx context.Context, sess *loop.Session, replayed []loop.Event) {
	if sess.State() == loop.StateClosed {
		return
	}
	submitted := make(chan error, 1)
	running := false
	startInput := func(resume bool, text string) {
		running = true
		go func() {
			if resume {
				submitted <- sess.Resume(ctx)
				return
			}
			submitted <- sess.Submit(ctx, text)
		}()
	}
	switch {
	case sess.NeedsResume():
		startInput(true, "")
	case !promptSubmitted(replayed):
		startInput(false, s.obj.Spec.Prompt)
	}
	var waiting []agentsv1.Message
	for {
		s.mu.Lock()
		queued := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, m := range queued {
			if running && m.Kind == agentsv1.MessageSteer {
				sess.Steer(m.Text)
				s.delivered(m.Name)
				continue
			}
			waiting = append(waiting, m)
		}
		if !running && len(waiting) > 0 {
			m := waiting[0]
			waiting = waiting[1:]
			s.delivered(m.Name)
			startInput(false, m.Text)
		}
		select {
		case <-s.wake:
		case err := <-submitted:
			running = false
			if s.inputEnded(ctx, err) {
				return
			}
			s.signal() // look at waiting messages again
		case <-ctx.Done():
			s.stoppedByContext(ctx)
			return
		}
	}
}

// inputEnded handles the end of one Submit or Resume and reports whether the
// session must stop.
func (s *session) inputEnded(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		s.stoppedByContext(ctx)
		return true
	}
	if err != nil {
		s.fail(agentsv1.ReasonFailed, err.Error())
		return true
	}
	s.mu.Lock()
	failed, reason, msg := s.prog.Phase == agentsv1.PhaseFailed, s.prog.Reason, s.prog.Error
	s.mu.Unlock()
	if failed { // a limit (TURN_LIMIT) ended the input
		s.fail(reason, msg)
		return true
	}
	return false
}

func (s *session) delivered(name string) {
	s.mu.Lock()
	s.prog.Delivered = append(s.prog.Delivered, name)
	s.mu.Unlock()
	s.notify(true)
}

// finish closes the loop (detaching the journal first when suspending) and
// releases the environment.
func (s *session) finish(sess *loop.Session, dj *detachable, consumed <-chan struct{}) {
	s.mu.Lock()
	mode := s.mode
	if mode == stopNone {
		// The goroutine ended on its own (a restored CLOSED session): nothing to stop.
		mode = stopAbort
		if !s.prog.Phase.IsFinal() {
			s.prog.Phase, s.prog.Reason = agentsv1.PhaseFailed, agentsv1.ReasonFailed
			s.prog.Error = "the journal says the session was closed"
		}
	}
	s.mu.Unlock()
	if mode == stopDetach {
		dj.detach()
	}
	if err := sess.Close(); err != nil {
		s.log.Error(err, "Closing the loop failed")
	}
	timer := time.NewTimer(cleanupTimeout)
	defer timer.Stop()
	select {
	case <-consumed:
	case <-timer.C:
		s.log.Info("Events of the closed loop were not drained in time")
	}
}
