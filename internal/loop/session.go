package loop

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Session is the central orchestrator of seed 000 §2.1.
//
// Concurrency contract: Submit and Resume run on the caller's goroutine and
// only one runs at a time (others get ErrBusy). Steer, FollowUp,
// SetReasoningEffort, State, History, Events and Close are safe from any
// goroutine. Cancelling the ctx of a running Submit or calling Close aborts
// the session: the in-flight model call is cancelled, running commands are
// killed by the environment, events are flushed, SESSION_END is emitted,
// subagents are closed and the session is CLOSED.
type Session struct {
	id      string
	profile Profile
	env     tool.ExecutionEnvironment
	client  Client
	cfg     SessionConfig
	journal Journal
	policy  ToolPolicy
	approve Approver
	now     func() time.Time
	depth   int
	em      *emitter
	// spawner is nil when this session may not spawn (depth limit).
	spawner tool.SubagentSpawner
	local   *localSpawner // the in-process spawner, if used
	files   *FileViews    // read tracking, shared with subagents (readtrack.go)

	life       context.Context // lives until the session is closed (subagents)
	cancelLife context.CancelFunc

	mu           sync.Mutex
	state        State
	history      []Turn
	historyChars int
	steering     []string
	followups    []string
	effort       string
	turns        int // model calls of the whole session
	started      bool
	prompt       *PromptContext
	running      chan struct{} // closed when the running Submit/Resume ends
	cancelRun    context.CancelCauseFunc
	needsResume  bool
	closing      bool
	resumeRound  int
	pending      *pendingRound
	lastText     string
	// pausedAtModel is set when the running input paused on a model outage
	// (WithPauseOnModelOutage): Resume then makes the same model call again.
	pausedAtModel bool
	pauseOnOutage bool

	// Context accounting and compaction (compaction.go): the provider's
	// input tokens for the last request and that request's characters.
	compactClient Client
	ctxLastInput  int64
	ctxLastChars  int
	lastRequest   ContextUsage
	// overflow says what was tried when the provider still rejects a
	// request as too long (process.go).
	overflow string
	// extra holds the session's own tools (todo, skill: sessiontools.go).
	extra  *tool.Registry
	skills []Skill
	plan   []PlanItem
	// deferred are the extra tools behind tool_search (toolsearch.go), nil
	// when every tool is sent. It is replaced (under mu) when a source's
	// tools change.
	deferred *deferredTools
	// staticExtra names the tools of WithExtraTools.
	staticExtra map[string]bool
	// sources are the tool sources of WithExtraToolSource (toolsource.go);
	// gone maps the tools a source stopped offering to the source's name
	// (guarded by mu).
	sources []*toolSource
	gone    map[string]string
	// webSearch offers the provider's server-side web search on every
	// model request (websearch.go); nil when off.
	webSearch *llm.WebSearch
	// toolGate, if set, is waited for before any tool call runs
	// (WithToolGate).
	toolGate <-chan struct{}
	// gathered, if set, is what Gather took ahead for start.
	gathered *Gathered
}

type options struct {
	cfg       SessionConfig
	journal   Journal
	spawner   tool.SubagentSpawner
	policy    ToolPolicy
	approver  Approver
	now       func() time.Time
	id        string
	depth     int
	buffer    int
	restore   []Event
	restoreOn bool
	pause     bool
	files     *FileViews
	// extraTools are the tools of WithExtraTools (extratools.go).
	extraTools []tool.Registered
	// sources are the sources of WithExtraToolSource (toolsource.go).
	sources    []namedSource
	toolSearch ToolSearchConfig
	// webSearch is the option of WithWebSearch (websearch.go).
	webSearch *llm.WebSearch
	toolGate  <-chan struct{}
	// gathered is the option of WithGathered (gather.go).
	gathered *Gathered

	compactClient Client
}

// Option configures New.
type Option func(*options) error

// WithConfig sets the session configuration (start from DefaultConfig).
func WithConfig(cfg SessionConfig) Option {
	return func(o *options) error { o.cfg = cfg; return nil }
}

// WithJournal makes the session durable: every event is appended and synced
// at the boundaries documented on Journal.
func WithJournal(j Journal) Option {
	return func(o *options) error { o.journal = j; return nil }
}

// WithSubagentSpawner replaces the in-process subagent spawner (the
// operator spawns child AgentSessions instead).
func WithSubagentSpawner(s tool.SubagentSpawner) Option {
	return func(o *options) error { o.spawner = s; return nil }
}

// WithToolPolicy installs the pre-execute tool policy (default: allow all).
func WithToolPolicy(p ToolPolicy) Option {
	return func(o *options) error { o.policy = p; return nil }
}

// WithApprover lets a human answer Ask verdicts. Without it the session is
// headless and Ask means Deny.
func WithApprover(a Approver) Option {
	return func(o *options) error { o.approver = a; return nil }
}

// WithClock sets the clock used for timestamps and today's date.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return errors.New("nil clock")
		}
		o.now = now
		return nil
	}
}

// WithID sets the session id (default: a random UUID).
func WithID(id string) Option {
	return func(o *options) error { o.id = id; return nil }
}

// WithDepth sets the subagent depth of the session (0 for top level).
func WithDepth(depth int) Option {
	return func(o *options) error {
		if depth < 0 {
			return fmt.Errorf("negative depth %d", depth)
		}
		o.depth = depth
		return nil
	}
}

// WithEventBuffer sets how many events may wait for the consumer
// (default 1024; see Events for the policy when it is full).
func WithEventBuffer(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("event buffer %d must be at least 1", n)
		}
		o.buffer = n
		return nil
	}
}

// WithPauseOnModelOutage makes a model call that still fails with a
// transient error after the client's retries pause the input instead of
// closing the session: Submit or Resume returns an error wrapping
// ErrModelUnavailable, the state stays PROCESSING, and Resume makes the same
// model call again. Without it such an error closes the session (seed 000
// Appendix B).
func WithPauseOnModelOutage() Option {
	return func(o *options) error { o.pause = true; return nil }
}

// WithToolGate makes every tool call wait until gate is closed (or its
// context ends): the session starts, gathers its prompt context and calls
// the model meanwhile. A host uses it for work that must see the workspace
// before any tool changes it, such as recording the change baseline.
func WithToolGate(gate <-chan struct{}) Option {
	return func(o *options) error { o.toolGate = gate; return nil }
}

// WithRestore rebuilds the session from its journaled events (see Restore).
func WithRestore(events []Event) Option {
	return func(o *options) error { o.restore = slices.Clone(events); o.restoreOn = true; return nil }
}

// New creates a session for profile, running tools in env and calling the
// model through client.
func New(profile Profile, env tool.ExecutionEnvironment, client Client, opts ...Option) (*Session, error) {
	if profile == nil || env == nil || client == nil {
		return nil, errors.New("new session: profile, environment and client are required")
	}
	o := options{cfg: DefaultConfig(), now: time.Now, buffer: DefaultEventBuffer}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new session: %w", err)
		}
	}
	if err := o.cfg.validate(); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	if o.id == "" && o.restoreOn && len(o.restore) > 0 {
		o.id = o.restore[0].SessionID
	}
	if o.id == "" {
		o.id = newUUID()
	}
	s := &Session{
		id: o.id, profile: profile, env: env, client: client, cfg: o.cfg,
		journal: o.journal, policy: o.policy, approve: o.approver, now: o.now, depth: o.depth,
		state: StateIdle, effort: o.cfg.ReasoningEffort, pauseOnOutage: o.pause,
		compactClient: o.compactClient, webSearch: o.webSearch, toolGate: o.toolGate, gathered: o.gathered,
	}
	if err := s.initSessionTools(); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	if err := s.registerExtraTools(o.extraTools); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	s.staticExtra, s.gone = map[string]bool{}, map[string]string{}
	for _, t := range o.extraTools {
		s.staticExtra[t.Definition.Name] = true
	}
	sourced, err := s.registerToolSources(o.sources)
	if err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	if err := s.setupToolSearch(o.toolSearch, append(slices.Clone(o.extraTools), sourced...)); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	s.life, s.cancelLife = context.WithCancel(context.Background())
	s.files = orNewFileViews(o.files)
	if s.depth < s.cfg.MaxSubagentDepth {
		if o.spawner != nil {
			s.spawner = o.spawner
		} else {
			s.local = newLocalSpawner(s)
			s.spawner = s.local
		}
	}
	var seq uint64
	if o.restoreOn {
		var err error
		if seq, err = s.restore(o.restore); err != nil {
			return nil, fmt.Errorf("new session: %w", err)
		}
	}
	s.em = newEmitter(s.life, s.id, s.now, s.journal, o.buffer, seq)
	if s.state == StateClosed {
		s.em.closed = true // a closed session only replays nothing
	}
	return s, nil
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Depth returns the subagent depth (0 for a top-level session).
func (s *Session) Depth() int { return s.depth }

// State returns the current state.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// History returns a copy of the conversation history.
func (s *Session) History() []Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history)
}

// TurnCount returns the number of model calls made in the session.
func (s *Session) TurnCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turns
}

// Events returns the event stream. It is closed after the SESSION_END that
// follows Close or an abort. Events wait in a bounded buffer (see
// WithEventBuffer): when it is full, text and output deltas are coalesced
// per call without loss and without blocking, and other events make the loop
// wait for the consumer (bounded by its ctx; Close never waits). Hosts must
// keep reading until the channel is closed.
func (s *Session) Events() <-chan Event { return s.em.events() }

// Steer queues a message injected after the current tool round (or before
// the first model call of the next Submit when idle).
func (s *Session) Steer(message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steering = append(s.steering, message)
}

// FollowUp queues an input processed after the current input completes.
func (s *Session) FollowUp(message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followups = append(s.followups, message)
}

// SetReasoningEffort changes the reasoning effort of the next model call.
func (s *Session) SetReasoningEffort(effort string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.effort = effort
}

// transitionLocked moves to state to, if seed 000 §2.3 allows it.
func (s *Session) transitionLocked(to State) error {
	if !CanTransition(s.state, to) {
		return fmt.Errorf("%w: %s -> %s", ErrInvalidTransition, s.state, to)
	}
	s.state = to
	return nil
}

func (s *Session) transition(to State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.transitionLocked(to)
}

// Submit processes input: the agentic loop runs until natural completion or
// a limit, then queued follow-ups run. It returns nil when the session ends
// IDLE or AWAITING_INPUT, and an error when the session was closed by an
// unrecoverable error or an abort (ctx cancelled or Close).
func (s *Session) Submit(ctx context.Context, input string) error {
	return s.run(ctx, false, func(ctx context.Context) error {
		return s.processInputs(ctx, input)
	})
}

// Close aborts any running input and closes the session. It does not wait
// for the event consumer.
func (s *Session) Close() error {
	for {
		s.mu.Lock()
		switch {
		case s.state == StateClosed:
			s.mu.Unlock()
			return nil
		case s.running != nil:
			done := s.running
			s.cancelRun(ErrClosed)
			s.mu.Unlock()
			<-done
			continue
		}
		s.closing = true // Submit and Resume now get ErrClosed
		s.running = make(chan struct{})
		done := s.running
		s.mu.Unlock()
		s.shutdown(nil)
		s.mu.Lock()
		s.running = nil
		close(done)
		s.mu.Unlock()
		return nil
	}
}

// run executes fn as the running input.
func (s *Session) run(ctx context.Context, resume bool, fn func(context.Context) error) error {
	s.mu.Lock()
	switch {
	case s.state == StateClosed || s.closing:
		s.mu.Unlock()
		return ErrClosed
	case s.running != nil:
		s.mu.Unlock()
		return ErrBusy
	case s.needsResume && !resume:
		s.mu.Unlock()
		return ErrResumeRequired
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	s.running, s.cancelRun = done, cancel
	s.mu.Unlock()
	s.em.setBase(runCtx)
	defer func() {
		s.em.setBase(s.life)
		cancel(nil)
		s.mu.Lock()
		s.running = nil
		close(done)
		s.mu.Unlock()
	}()

	err := s.start(runCtx)
	if err == nil {
		err = fn(runCtx)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrModelUnavailable) && runCtx.Err() == nil {
		return err // paused: the input resumes with Resume
	}
	if runCtx.Err() != nil {
		cause := context.Cause(runCtx)
		s.shutdown(fmt.Errorf("session aborted: %w", cause))
		if errors.Is(cause, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("submit: %w", cause)
	}
	s.shutdown(err)
	return err
}

// start emits SESSION_START and gathers the prompt context once.
func (s *Session) start(ctx context.Context) error {
	s.mu.Lock()
	started, prepared := s.started, s.prompt != nil
	s.started = true
	state := s.state
	s.mu.Unlock()
	if !started {
		if _, err := s.em.emit(ctx, EventSessionStart, EventData{State: string(state)}); err != nil {
			return err
		}
	}
	if prepared {
		return nil
	}
	s.mu.Lock()
	g := s.gathered
	s.mu.Unlock()
	if g == nil {
		g = Gather(ctx, s.profile, s.env, s.now(), !s.cfg.DisableSkillDiscovery)
	}
	pc, skills, problems, err := g.wait(ctx)
	s.mu.Lock()
	s.gathered = nil // used once; a start after a failed one gathers again
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("prepare system prompt: %w", err)
	}
	if s.cfg.DisableSkillDiscovery {
		skills, problems = nil, nil
	}
	pc.UserInstructions = s.cfg.UserInstructions
	if s.deferred != nil {
		pc.DeferredTools = s.deferred.catalogue
	}
	if err := s.prepareSkills(ctx, &pc, skills, problems); err != nil {
		return err
	}
	s.mu.Lock()
	s.prompt = &pc
	s.mu.Unlock()
	return nil
}

// finalTimeout bounds journal syncs and subagent shutdown while closing.
const finalTimeout = 10 * time.Second

// shutdown runs the graceful shutdown of seed 000 Appendix B. The model call
// and tools have already been cancelled and awaited by the caller.
func (s *Session) shutdown(cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), finalTimeout)
	defer cancel()
	if s.local != nil {
		s.local.closeAll(ctx)
	}
	s.cancelLife()
	s.mu.Lock()
	started, from := s.started, s.state
	s.started = true
	s.mu.Unlock()
	if !started {
		_ = s.emit(ctx, EventSessionStart, EventData{State: string(from)})
	}
	s.mu.Lock()
	s.state = StateClosed // any -> CLOSED
	data := EventData{State: string(StateClosed), Text: s.lastText}
	s.mu.Unlock()
	if cause != nil {
		data.Error = cause.Error()
	}
	if _, err := s.em.final(ctx, EventSessionEnd, data); err != nil && !errors.Is(err, ErrClosed) {
		_ = err // the stream is closed either way; the journal error has been recorded
	}
	_ = s.sync(ctx)
}

// sync makes the journal durable at a boundary.
func (s *Session) sync(ctx context.Context) error {
	if s.journal == nil {
		return nil
	}
	if err := s.journal.Sync(ctx); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// emit emits a non-delta event.
func (s *Session) emit(ctx context.Context, kind EventKind, data EventData) error {
	_, err := s.em.emit(ctx, kind, data)
	return err
}

// emitSync emits an event and syncs the journal (a boundary).
func (s *Session) emitSync(ctx context.Context, kind EventKind, data EventData) error {
	if err := s.emit(ctx, kind, data); err != nil {
		return err
	}
	return s.sync(ctx)
}

func (s *Session) appendTurn(t Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history = append(s.history, t)
	s.historyChars += t.size()
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// request builds the model request for the current history (seed 000 §2.5
// step 2).
func (s *Session) request() *llm.Request {
	s.mu.Lock()
	pc := *s.prompt
	msgs := s.viewMessagesLocked()
	effort := s.effort
	s.mu.Unlock()
	caps := s.profile.Capabilities()
	if !caps.Reasoning {
		effort = "" // a model without reasoning rejects the parameter
	}
	parallel := caps.ParallelToolCalls
	system := s.profile.BuildSystemPrompt(pc)
	return &llm.Request{
		Model:             s.profile.Model(),
		Messages:          append([]llm.Message{llm.TextMessage(llm.RoleSystem, system)}, msgs...),
		Tools:             s.toolDefinitions(),
		ToolChoice:        llm.ToolChoiceAuto,
		ReasoningEffort:   effort,
		ParallelToolCalls: &parallel,
		ProviderOptions:   s.profile.ProviderOptions(),
		CacheKey:          s.id,
		WebSearch:         s.webSearchRequest(),
	}
}
