package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
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

// session is the runner of one AgentSession, for as long as it works: it
// ends (and is forgotten) when the session goes idle, fails, is aborted or
// suspended; a later message starts a new one that restores it from the
// journal.
type session struct {
	r      *Runner
	obj    *agentsv1.AgentSession
	pod    string
	key    types.NamespacedName
	log    logr.Logger
	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu    sync.Mutex
	prog  Progress
	known map[string]bool
	queue []agentsv1.Message
	// inflight are messages handed to the loop (as input or steering) whose
	// USER_INPUT or STEERING_INJECTED has not been seen yet: they count as
	// delivered only once the journal holds them.
	inflight      []agentsv1.Message
	mode          stopMode
	failReason    string
	failMessage   string
	lastNotify    time.Time
	notifyPending bool
	// dj is the session's journal, set once built; stop detaches it before
	// it cancels, so nothing the unwinding loop emits reaches the journal.
	dj *detachable
	// redactor removes the session's API key from the texts progress keeps
	// (result, error), as the journal does from events; nil until the key
	// is known, and when there is none.
	redactor *events.Redactor
	// env is the session's workspace environment once built (changes.go).
	env tool.ExecutionEnvironment
	// baselined is closed once the change baseline is recorded (or there
	// is none to record): the loop's tool calls and the change's recording
	// wait for it (changes.go).
	baselined chan struct{}
	// driver is the claim this runner drives the session under, presented
	// to the workspace by every stream (owner.go); set before build.
	driver Driver
	// superOnce makes the workspace's first refusal of this driver stop the
	// session; later refusals only fail their calls.
	superOnce sync.Once
	// pickup is when this runner started; the start stages count from it
	// (start.go).
	pickup time.Time
	// ahead is the workspace environment built (and opening) once the
	// claim is held, or aheadErr why it could not be built (start.go).
	ahead    tool.ExecutionEnvironment
	aheadErr error
	// config is the client configuration read while the claim is taken,
	// nil when it was not read ahead (start.go).
	config *configRead
}

func newSession(r *Runner, obj *agentsv1.AgentSession, pod string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		r: r, obj: obj, pod: pod,
		key: types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name},
		log: r.opts.Log.WithValues("agentSession", obj.Namespace+"/"+obj.Name),
		ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1),
		known: map[string]bool{}, baselined: make(chan struct{}),
	}
	s.prog.JournalAvailable = true
	if p := r.opts.Prices; p.Known(string(obj.Spec.Model.Provider), obj.Spec.Model.Name) {
		s.prog.Currency = p.Currency()
	}
	// Until the journal is read, status's view of what was delivered stands;
	// restored replaces it with what the journal holds.
	for _, n := range obj.Status.MessagesDelivered {
		s.known[n] = true
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

// ended reports whether the goroutine has ended.
func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *session) snapshot() Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prog.clone()
}

// stop asks the goroutine to end; the first reason wins. A detaching stop
// detaches the journal before it cancels anything, so that the unwinding
// input journals nothing (a SESSION_END(CLOSED) would make the journal
// unresumable).
func (s *session) stop(mode stopMode) {
	s.mu.Lock()
	if s.mode == stopNone {
		s.mode = mode
		if mode == stopAbort {
			s.prog.Phase, s.prog.Reason = agentsv1.PhaseAborted, agentsv1.ReasonAborted
		}
	}
	detach, dj := s.mode == stopDetach, s.dj
	s.mu.Unlock()
	if detach && dj != nil {
		dj.detach()
	}
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
	s.pickup = time.Now()
	aheadCtx, stopAhead := context.WithCancel(s.ctx)
	defer stopAhead()
	s.readConfigAhead(aheadCtx) // beside the claim (start.go)
	defer func() {
		// The read ahead ends before the runner says it has: an ended
		// runner reads nothing more.
		stopAhead()
		if s.config != nil {
			<-s.config.done
		}
		s.mu.Lock()
		s.prog.Done = true
		s.mu.Unlock()
		close(s.done)
		s.r.released(s)
		s.notify(true)
	}()
	if cl, ok := s.claim(); !ok {
		return // another instance drives the session, or the claim failed
	} else if cl != nil {
		s.driver = driverOf(s.r.opts.Claims.Me, cl)
		keepCtx, stopKeeping := context.WithCancel(s.ctx)
		kept := make(chan struct{})
		go func() {
			defer close(kept)
			cl.Keep(keepCtx, func(err error) {
				s.log.Info("Lost the session's claim; stopping at once", "reason", err.Error())
				s.stop(stopDetach) // the new holder resumes from the journal
			}, func(err error) {
				s.log.Info("Could not renew the session's claim; trying again", "reason", err.Error())
			})
		}()
		defer func() {
			stopKeeping()
			<-kept // no renewal after the release
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			if err := cl.Release(ctx); err != nil {
				s.log.Info("Could not release the session's claim; it expires by itself", "reason", err.Error())
			}
		}()
	}
	s.stage(StageRunnerClaim, time.Since(s.pickup))
	if !s.r.acquireRestore(s.ctx) {
		return // stopped while waiting for a restore slot
	}
	// The exec stream opens while the loop is built (start.go). After the
	// restore slot, so a burst of starts (a wide fan-out) opens its streams
	// no faster than it builds its loops.
	s.openAhead()
	built := time.Now()
	sess, dj, replayed, err := s.build(s.ctx)
	s.r.releaseRestore()
	if err != nil {
		s.buildFailed(err)
		return
	}
	s.stage(StageBuild, time.Since(built))
	s.restored(replayed)
	defer s.joinBudget(s.ctx)()      // after the replay: it knows what was spent
	go s.changesBaseline()           // issue 17: before any tool runs (changes.go)
	defer func() { <-s.baselined }() // ends within its git timeout, before the claim's release
	consumed := make(chan struct{})
	go s.consume(sess.Events(), consumed)
	s.drive(sess, replayed)
	s.finish(sess, dj, consumed)
}

// claim claims the session for this instance before anything runs. It
// reports false when the runner must end: another instance holds a live
// claim, or the claim could not be read or written (progress says which).
func (s *session) claim() (*claim.Claim, bool) {
	if s.r.opts.Claims == nil {
		return nil, true
	}
	cl, err := s.r.opts.Claims.AcquireFrom(s.ctx, s.obj, s.r.floors.floor(s.obj.UID))
	if err == nil {
		s.mu.Lock()
		s.prog.Owner = s.r.opts.Claims.Me.String()
		s.mu.Unlock()
		return cl, true
	}
	s.mu.Lock()
	var f *claim.Foreign
	if errors.As(err, &f) {
		s.prog.Foreign, s.prog.ForeignUntil = f.Holder.String(), f.Until
	} else {
		s.prog.ClaimError = err.Error()
	}
	s.mu.Unlock()
	return nil, false
}

// build creates the LLM client, environment, profile, journal and loop.
func (s *session) build(ctx context.Context) (*loop.Session, *detachable, []loop.Event, error) {
	cc, err := s.clientConfig(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if f := s.r.opts.LLMRetries; f != nil {
		cc.OnRetry = f(cc.Provider)
	}
	llmc, err := s.r.opts.Clients(ctx, cc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := checkPriced(s.r.opts.Prices, s.obj); err != nil {
		return nil, nil, nil, err
	}
	llmc = budgetedClient{Client: llmc, s: s}
	prof, err := buildProfile(&s.obj.Spec)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	env, err := s.workspaceEnv() // built, and opening, since the claim (start.go)
	if err != nil {
		return nil, nil, nil, err
	}
	// A workspace that has seen a newer driver of the session refuses this
	// one's calls: stop at once, like a fenced journal (owner.go).
	env = guardOwner(env, s.superseded)
	s.env = env // for recording changes (changes.go)
	// What the loop's start gathers from the workspace (git snapshot,
	// project instructions, skills) is taken now, while the journal opens
	// and the rest is built, not after.
	loopEnv := scopeEnv(env, s.obj)
	gatheredAt := time.Now()
	gathered := loop.Gather(ctx, prof, loopEnv, gatheredAt, true)
	j, replayed, err := s.openJournal(ctx, cc.APIKey)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(replayed) == 0 && s.obj.Status.LastEventSequence > 0 {
		// Starting over would run the task (and its side effects) a second time.
		return nil, nil, nil, fmt.Errorf("%w (status recorded %d events): the session cannot be resumed",
			ErrJournalLost, s.obj.Status.LastEventSequence)
	}
	cfg, err := sessionLoopConfig(ctx, s.reader(), s.obj) // skills from spec.skills' ConfigMaps
	if err != nil {
		return nil, nil, nil, err
	}
	mcpSources, mcpWarnings, closeMCP, err := s.connectMCP(ctx) // spec.tools.mcpServers (mcp.go)
	if err != nil {
		return nil, nil, nil, err
	}
	go func() { <-s.done; closeMCP() }() // the connections last as long as this runner
	cfg.SkillWarnings = append(cfg.SkillWarnings, mcpWarnings...)
	dj := &detachable{j: j}
	s.mu.Lock()
	s.dj = dj
	if s.mode == stopDetach {
		dj.detach() // stopped while the journal opened
	}
	s.mu.Unlock()
	opts := []loop.Option{
		loop.WithConfig(cfg),
		loop.WithJournal(dj),
		loop.WithID(string(s.obj.UID)),
		loop.WithPauseOnModelOutage(),
		loop.WithToolGate(s.baselined),                     // the first turn's model call overlaps the baseline
		loop.WithToolSearch(toolSearchConfig(&s.obj.Spec)), // spec.tools.toolSearch
		loop.WithWebSearch(webSearchConfig(&s.obj.Spec)),   // spec.tools.webSearch
	}
	if time.Since(gatheredAt) <= gatherFresh {
		opts = append(opts, loop.WithGathered(gathered))
	} // else the journal or an MCP server kept the build waiting: the loop gathers at its start
	opts = append(opts, mcpSourceOptions(mcpSources)...) // refreshed between turns
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
		opts = append(opts, loop.WithSubagentSpawner(&childSpawner{c: s.r.opts.Client, r: s.r.opts.Reader, parent: s.obj, watch: s.r.children,
			budgets: s.r.budgets, worked: func() time.Duration { return s.snapshot().WorkingTime(s.r.opts.Now()) }}))
	}
	sess, err := loop.New(prof, loopEnv, llmc, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("new loop session: %w", err)
	}
	return sess, dj, replayed, nil
}

// gatherFresh is how long before the loop is built what build gathered
// from the workspace is still used: a build that waited longer (NATS or an
// MCP server away for a while; a shared workspace's parent and siblings go
// on changing it meanwhile) leaves the loop to gather at its start.
var gatherFresh = 5 * time.Second

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
	if errors.Is(err, events.ErrFenced) {
		// Another writer opened this session's journal after us (it took the
		// session over while this one was paused or cut off): append nothing
		// more, run nothing more; the journal stays as the new writer has it.
		s.log.Info("Fenced: another writer took this session's journal over; stopping at once")
		s.stop(stopDetach)
		return
	}
	s.mu.Lock()
	s.prog.JournalAvailable = available
	s.prog.JournalError = ""
	if err != nil {
		s.prog.JournalError = err.Error()
	}
	s.mu.Unlock()
	if f := s.r.opts.JournalState; f != nil {
		f(available)
	}
	s.notify(true)
}

// buildFailed reports why the session could not start. A session that is
// idle (Succeeded or AwaitingInput) and whose journal expired keeps its
// phase: it says so (HistoryExpired), and its messages wait undelivered.
func (s *session) buildFailed(err error) {
	if s.ctx.Err() != nil {
		return // stopped: the stop's mode says why
	}
	if errors.Is(err, ErrJournalLost) && isIdle(s.obj.Status.Phase) {
		s.log.Info("The journal no longer holds this idle session's events; it cannot be resumed", "reason", err.Error())
		s.mu.Lock()
		s.prog.Phase, s.prog.Reason = s.obj.Status.Phase, string(s.obj.Status.Phase)
		s.prog.HistoryExpired = true
		s.mu.Unlock()
		return
	}
	if errors.Is(err, ErrJournalLost) && s.r.opts.Claims != nil && s.obj.Status.Owner != "" &&
		claim.ParseHolder(s.obj.Status.Owner).Install != s.r.opts.Claims.Me.Install {
		// Another install drove it and its journal is not this install's (each
		// embedded NATS is its own): leave it to that install rather than fail it.
		s.log.Info("The session's journal belongs to another install; leaving the session to it", "owner", s.obj.Status.Owner)
		s.mu.Lock()
		s.prog.Foreign = s.obj.Status.Owner + " (its journal is not reachable from this install)"
		s.prog.ForeignUntil = s.r.opts.Now().Add(claim.DefaultDuration)
		s.mu.Unlock()
		return
	}
	reason := agentsv1.ReasonFailed
	if errors.Is(err, ErrConfig) {
		reason = agentsv1.ReasonConfigError
	}
	s.log.Error(err, "Session could not start")
	s.fail(reason, err.Error())
}

// isIdle reports whether phase is one where no input runs and the session
// waits for a message.
func isIdle(phase agentsv1.Phase) bool {
	return phase == agentsv1.PhaseSucceeded || phase == agentsv1.PhaseAwaitingInput
}

// restored folds the replayed events into progress; what was delivered is
// what the journal holds, whatever status said.
func (s *session) restored(replayed []loop.Event) {
	s.mu.Lock()
	for _, ev := range replayed {
		s.fold(ev)
	}
	found := deliveredInJournal(s.obj.Spec.Messages, replayed)
	s.prog.Delivered = found
	s.prog.Restored = true
	// Every message is known from now on: the journal's are delivered, the
	// rest (also those status called delivered but the journal lacks) queue.
	s.known = map[string]bool{}
	for _, q := range s.queue {
		s.known[q.Name] = true
	}
	for _, m := range s.obj.Spec.Messages {
		if !s.known[m.Name] && !slices.Contains(found, m.Name) {
			s.queue = append(s.queue, m)
		}
		s.known[m.Name] = true
	}
	s.mu.Unlock()
	s.notify(true)
	s.signal()
}

// consume folds live events into progress, notes which handed-over
// messages the journal now holds, and charges each model call to the
// budget ledger.
func (s *session) consume(evs <-chan loop.Event, done chan<- struct{}) {
	defer close(done)
	info := sessionInfo(s.obj)
	var first firstTool
	for ev := range evs {
		s.mu.Lock()
		if s.mode == stopDetach {
			s.mu.Unlock()
			continue // not journaled: status must not run ahead of the journal
		}
		before, reason, msg := s.prog.Phase, s.prog.Reason, s.prog.Error
		ev = redactEvent(s.redactor, ev)
		s.fold(ev)
		for _, o := range s.r.opts.Observers {
			o.Observe(info, ev)
		}
		if ev.Kind == loop.EventSessionEnd && ev.Data.State == string(loop.StateClosed) {
			// A live loop closes because the runner stopped it or its input
			// failed; the runner, not this event, says why (inputEnded, stop).
			s.prog.Phase, s.prog.Reason, s.prog.Error = before, reason, msg
		}
		changed := s.prog.Phase != before
		if ev.Kind == loop.EventUserInput || ev.Kind == loop.EventSteeringInjected {
			if i := slices.IndexFunc(s.inflight, func(m agentsv1.Message) bool { return m.Text == ev.Data.Content }); i >= 0 {
				s.inflight = slices.Delete(s.inflight, i, i+1) // journaled: no longer in flight
			}
		}
		switch s.mode { // what the runner decided stands, whatever the unwinding loop says
		case stopFail:
			s.prog.Phase, s.prog.Reason, s.prog.Error = agentsv1.PhaseFailed, s.failReason, s.failMessage
		case stopAbort:
			s.prog.Phase, s.prog.Reason = agentsv1.PhaseAborted, agentsv1.ReasonAborted
		}
		changed = changed || s.prog.Phase != before
		s.mu.Unlock()
		first.see(s, ev) // the start stages of the first tool call (start.go)
		if ev.Kind == loop.EventAssistantTextEnd && ev.Data.Usage != nil {
			// The ledger ends the session whose tree budget this crosses.
			s.r.budgets.Charge(ledgerID(s.obj.Namespace, s.obj.Name), s.spendOf(*ev.Data.Usage))
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

// input is the one input the loop is processing.
type input struct {
	ctx    context.Context // bounded by the working-time deadline
	cancel context.CancelFunc
	done   chan error
}

// startInput runs Submit(text), or Resume when resume is set, under the
// working-time deadline.
func (s *session) startInput(sess *loop.Session, resume bool, text string) *input {
	ctx, cancel := s.inputContext()
	in := &input{ctx: ctx, cancel: cancel, done: make(chan error, 1)}
	go func() {
		if resume {
			in.done <- sess.Resume(ctx)
			return
		}
		in.done <- sess.Submit(ctx, text)
	}()
	return in
}

// inputContext bounds an input by what is left of spec.limits.deadline:
// the working time of earlier inputs is spent, and the running input's
// clock started at its USER_INPUT (now for a new one). Its tool calls wait
// for an unreachable workspace for as long as the input lives (up to
// Options.WorkspaceOutageTolerance each), not only for their own time limit.
func (s *session) inputContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	if d := s.obj.Spec.Limits.Deadline; d != nil {
		s.mu.Lock()
		worked, since := s.prog.Worked, s.prog.InputSince
		s.mu.Unlock()
		if since.IsZero() {
			since = s.r.opts.Now()
		}
		ctx, cancel = context.WithDeadline(s.ctx, since.Add(d.Duration-worked))
	}
	return k8senv.ContextWithWait(ctx, k8senv.Wait{Context: ctx, Tolerance: s.r.opts.WorkspaceOutageTolerance,
		Report: s.workspaceUnavailable}), cancel
}

// workspaceUnavailable records that a tool call waits for the workspace's
// exec stream, failing with err, or (nil) that the stream opened after it
// did: the WorkspaceAvailable condition. Status is written at once when
// the wait starts and when it ends; the errors in between go with the next
// write.
func (s *session) workspaceUnavailable(err error) {
	s.mu.Lock()
	was := s.prog.WorkspaceUnavailable != ""
	if err == nil {
		s.prog.WorkspaceUnavailable, s.prog.WorkspaceUnavailableSince = "", time.Time{}
	} else {
		msg := err.Error()
		if s.redactor != nil {
			msg = s.redactor.String(msg)
		}
		if !was {
			s.prog.WorkspaceUnavailableSince = s.r.opts.Now()
		}
		s.prog.WorkspaceUnavailable = msg
	}
	now := s.prog.WorkspaceUnavailable != ""
	s.mu.Unlock()
	if was != now {
		s.notify(true)
	}
}

// drive gives the loop the prompt and the messages, one input at a time,
// and returns when the session is idle with nothing left to do, or must stop.
func (s *session) drive(sess *loop.Session, replayed []loop.Event) {
	if sess.State() == loop.StateClosed {
		return
	}
	var (
		in      *input
		retry   *time.Timer // set while paused on a model outage
		waiting []agentsv1.Message
		outage  = s.r.opts.OutageBackoff
	)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	switch {
	case sess.NeedsResume():
		in = s.startInput(sess, true, "")
	case !promptSubmitted(replayed):
		in = s.startInput(sess, false, s.obj.Spec.Prompt)
	}
	for {
		s.mu.Lock()
		queued := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, m := range queued {
			if (in != nil || retry != nil) && m.Kind == agentsv1.MessageSteer {
				sess.Steer(m.Text)
				s.handOver(m)
				continue
			}
			waiting = append(waiting, m)
		}
		if in == nil && retry == nil {
			if len(waiting) == 0 {
				return // idle: the runner ends; a message restores the session
			}
			m := waiting[0]
			waiting = waiting[1:]
			s.handOver(m)
			in = s.startInput(sess, false, m.Text)
		}
		var inDone <-chan error
		if in != nil {
			inDone = in.done
		}
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		select {
		case <-s.wake:
		case err := <-inDone:
			ended := in
			in = nil
			ended.cancel()
			switch s.inputEnded(ended.ctx, err) {
			case inputStop:
				return
			case inputPaused:
				wait := outage.next()
				s.log.Info("Model unavailable; retrying the call later", "after", wait.String())
				retry = time.NewTimer(wait)
			default:
				outage.reset()
				s.recordChanges(sess) // issue 17: an input ended Succeeded (changes.go)
			}
			s.signal() // look at waiting messages again
		case <-retryC:
			retry = nil
			in = s.startInput(sess, true, "")
		case <-s.ctx.Done():
			return
		}
	}
}

// handOver records that m was given to the loop: it counts as delivered,
// and until its input event is seen it is also in flight (see takeBack).
func (s *session) handOver(m agentsv1.Message) {
	s.mu.Lock()
	s.inflight = append(s.inflight, m)
	s.prog.Delivered = append(s.prog.Delivered, m.Name)
	s.mu.Unlock()
	s.notify(true)
}

// takeBack un-delivers the messages the loop was given but never journaled
// (a steer still queued when the input ended or the session stopped): the
// loop that held them is gone, so the next runner must get them again.
func (s *session) takeBack() {
	s.mu.Lock()
	for _, m := range s.inflight {
		if i := slices.Index(s.prog.Delivered, m.Name); i >= 0 {
			s.prog.Delivered = slices.Delete(s.prog.Delivered, i, i+1)
		}
	}
	s.inflight = nil
	s.mu.Unlock()
}

type inputOutcome int

const (
	inputDone   inputOutcome = iota // the input ended; the session goes on
	inputPaused                     // the model is unavailable; resume later
	inputStop                       // the session must stop
)

// inputEnded handles the end of one Submit or Resume run under ctx.
func (s *session) inputEnded(ctx context.Context, err error) inputOutcome {
	// No call of the input waits for the workspace any more (one that gave
	// up after the tolerance left its error).
	s.mu.Lock()
	s.prog.WorkspaceUnavailable, s.prog.WorkspaceUnavailableSince = "", time.Time{}
	s.mu.Unlock()
	switch {
	case s.ctx.Err() != nil:
		return inputStop // stopped: the stop's mode says why
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		s.fail(agentsv1.ReasonDeadlineExceeded, fmt.Sprintf("spec.limits.deadline (%s of working time) used up",
			s.obj.Spec.Limits.Deadline.Duration))
		return inputStop
	case errors.Is(err, loop.ErrModelUnavailable):
		return s.modelUnavailable(err)
	case err != nil:
		s.fail(agentsv1.ReasonFailed, err.Error())
		return inputStop
	}
	s.mu.Lock()
	failed, reason, msg := s.prog.Phase == agentsv1.PhaseFailed, s.prog.Reason, s.prog.Error
	s.prog.ModelUnavailable, s.prog.ModelUnavailableSince = "", time.Time{}
	s.mu.Unlock()
	if failed { // a limit (TURN_LIMIT) ended the input
		s.fail(reason, msg)
		return inputStop
	}
	return inputDone
}

// modelUnavailable records a model outage and decides whether to wait for
// the model (paused) or give up (spec.limits.modelOutageTolerance used up).
func (s *session) modelUnavailable(err error) inputOutcome {
	tolerance := DefaultModelOutageTolerance
	if t := s.obj.Spec.Limits.ModelOutageTolerance; t != nil {
		tolerance = t.Duration
	}
	now := s.r.opts.Now()
	msg := fmt.Sprintf("provider %s: %v", s.obj.Spec.Model.Provider, err)
	s.mu.Lock()
	if s.redactor != nil {
		msg = s.redactor.String(msg)
	}
	if s.prog.ModelUnavailableSince.IsZero() {
		s.prog.ModelUnavailableSince = now
	}
	since := s.prog.ModelUnavailableSince
	s.prog.ModelUnavailable = msg
	s.mu.Unlock()
	if now.Sub(since) >= tolerance {
		s.fail(agentsv1.ReasonModelUnavailable, fmt.Sprintf("the model was unavailable for %s (spec.limits.modelOutageTolerance %s); last error: %s",
			now.Sub(since).Round(time.Second), tolerance, msg))
		return inputStop
	}
	s.notify(true)
	return inputPaused
}

// finish closes the loop and releases the environment. A session that went
// idle, or is suspended, is detached first: its journal stays resumable.
func (s *session) finish(sess *loop.Session, dj *detachable, consumed <-chan struct{}) {
	s.mu.Lock()
	mode := s.mode
	if mode == stopNone {
		switch sess.State() {
		case loop.StateIdle, loop.StateAwaitingInput:
			mode = stopDetach // idle: nothing to stop, nothing more to journal
			s.mode = mode
		default:
			// The goroutine ended on its own (a restored CLOSED session): nothing to stop.
			mode = stopAbort
			if !s.prog.Phase.IsFinal() {
				s.prog.Phase, s.prog.Reason = agentsv1.PhaseFailed, agentsv1.ReasonFailed
				s.prog.Error = "the journal says the session was closed"
			}
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
	s.takeBack()
}
