package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/budget"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// DefaultNotifyInterval is the minimum time between two progress
// notifications of a session, except for phase changes and deliveries.
const DefaultNotifyInterval = 2 * time.Second

// EnvFactory returns the execution environment of a session whose workspace
// pod is pod, driven by this instance under d (the zero Driver without
// claims): every stream of the environment presents d, so the workspace
// refuses it once a newer driver of the session used it. The manager uses
// K8sEnvFactory; envtest suites, which have no kubelet, use a
// LocalExecutionEnvironment in a temporary directory.
type EnvFactory func(ctx context.Context, s *agentsv1.AgentSession, pod string, d Driver) (tool.ExecutionEnvironment, error)

// JournalOpener opens the journal of a session and returns its events so far
// (*events.Publisher implements it).
type JournalOpener interface {
	OpenJournal(ctx context.Context, session events.SessionRef, opts events.JournalOptions) (*events.Journal, []loop.Event, error)
}

// Options configures a Runner. Reader, Journals, Clients and Envs are required.
type Options struct {
	// Reader reads Secrets and ConfigMaps (use the manager's API reader).
	Reader client.Reader
	// Journals opens session journals.
	Journals JournalOpener
	// Clients builds LLM clients.
	Clients ClientFactory
	// Envs builds execution environments.
	Envs EnvFactory
	// Client creates and drives child AgentSessions for the subagent tools.
	// Nil keeps the loop's in-process subagents (they share the session's
	// environment and journal).
	Client client.Client
	// Informers (the manager's cache) wakes a parent's wait on the watch
	// events of its child sessions; required with Client.
	Informers cache.Informers
	// Notify is called, without blocking, when a session's progress changed.
	Notify func(key types.NamespacedName)
	// NotifyInterval rate-limits notifications (default DefaultNotifyInterval).
	NotifyInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log is the base logger.
	Log logr.Logger
	// ReleaseEnv, if set, is called when the last runner using a workspace
	// pod ended, so the exec stream to it is closed (k8senv.Pool.Release).
	ReleaseEnv func(namespace, pod string)
	// MaxConcurrentRestores bounds how many runners build and replay their
	// journal at once, e.g. after a manager restart (default
	// DefaultMaxConcurrentRestores).
	MaxConcurrentRestores int
	// WorkspaceOutageTolerance is how long one tool call of an input waits
	// for its workspace's exec stream while the API server, or the way
	// through it to the pod, is unavailable (k8senv.Wait); default
	// DefaultWorkspaceOutageTolerance.
	WorkspaceOutageTolerance time.Duration
	// OutageBackoff is the wait between model calls while the model is
	// unavailable (default 10 s doubling up to 2 min).
	OutageBackoff Backoff
	// Claims, when set, makes a runner claim its session before it runs
	// anything, keep the claim while it drives it, and stop at once when
	// the claim is lost (another install took it over); a session another
	// instance holds is left alone (Progress.Foreign).
	Claims *claim.Claims
	// Changes, when set, records each session's change (status.changes,
	// the stored patch and artifacts, the push) when an input ends
	// Succeeded.
	Changes ChangesRecorder
	// Observers see every live event of every session (metrics, traces).
	Observers []Observer
	// Prices turns usage into cost (default pricing.Default()).
	Prices *pricing.Table
	// JournalState, if set, is told each time a session's journal becomes
	// available or unavailable (the journal_available metric).
	JournalState func(available bool)
	// LLMRetries, if set, returns the OnRetry hook of a provider's clients
	// (metrics.Recorder.LLMRetryHook).
	LLMRetries func(provider string) func(attempt int, err error, wait time.Duration)
	// StartStage, if set, is told how long each stage of a runner's start
	// took (StageRunnerClaim, StageBuild, StageFirstToolCall,
	// StageRunnerToFirstTool), each at most once per runner; it must not
	// block.
	StartStage func(stage string, d time.Duration)
}

// DefaultMaxConcurrentRestores is the default of Options.MaxConcurrentRestores.
const DefaultMaxConcurrentRestores = 4

// DefaultModelOutageTolerance is how long a session waits for an unavailable
// model when spec.limits.modelOutageTolerance is unset.
const DefaultModelOutageTolerance = time.Hour

// DefaultWorkspaceOutageTolerance is the default of
// Options.WorkspaceOutageTolerance: as long as a model outage is waited for.
const DefaultWorkspaceOutageTolerance = time.Hour

// Backoff is an exponential wait: Initial first, doubled after each wait
// up to Max.
type Backoff struct {
	Initial, Max time.Duration
	cur          time.Duration
}

func (b *Backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Initial
	} else {
		b.cur = min(2*b.cur, b.Max)
	}
	return b.cur
}

func (b *Backoff) reset() { b.cur = 0 }

// Runner manages one goroutine per active session. It is safe for concurrent
// use.
type Runner struct {
	opts Options

	children *childWatch // nil without Options.Client

	restores chan struct{} // one token per restore in progress
	early    chan struct{} // one token per client configuration read ahead (start.go)

	// budgets is the spend of the session trees this runner drives.
	budgets *budget.Ledger

	// scripts are the parsed scripts of the scripted provider, shared by
	// the sessions of one ConfigMap revision.
	scripts *scriptCache

	// floors are the fences the sessions' next claims are taken past
	// (owner.go).
	floors fenceFloors

	mu       sync.Mutex
	sessions map[types.UID]*session
	pods     map[types.NamespacedName]int // runners per workspace pod
	closed   bool
}

// ErrShutdown is returned by Ensure after Shutdown.
var ErrShutdown = errors.New("runner is shut down")

// New returns a Runner.
func New(opts Options) (*Runner, error) {
	if opts.Reader == nil || opts.Journals == nil || opts.Clients == nil || opts.Envs == nil {
		return nil, errors.New("new runner: reader, journals, clients and envs are required")
	}
	if opts.Client != nil && opts.Informers == nil {
		return nil, errors.New("new runner: informers are required with a client (child sessions' waits wake on their watch events)")
	}
	if opts.NotifyInterval <= 0 {
		opts.NotifyInterval = DefaultNotifyInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Notify == nil {
		opts.Notify = func(types.NamespacedName) {}
	}
	if opts.MaxConcurrentRestores <= 0 {
		opts.MaxConcurrentRestores = DefaultMaxConcurrentRestores
	}
	if opts.Prices == nil {
		opts.Prices = pricing.Default()
	}
	if opts.WorkspaceOutageTolerance <= 0 {
		opts.WorkspaceOutageTolerance = DefaultWorkspaceOutageTolerance
	}
	if opts.OutageBackoff.Initial <= 0 {
		opts.OutageBackoff.Initial = 10 * time.Second
	}
	if opts.OutageBackoff.Max < opts.OutageBackoff.Initial {
		opts.OutageBackoff.Max = max(2*time.Minute, opts.OutageBackoff.Initial)
	}
	r := &Runner{opts: opts, sessions: map[types.UID]*session{}, pods: map[types.NamespacedName]int{},
		restores: make(chan struct{}, opts.MaxConcurrentRestores), budgets: budget.New(),
		early:   make(chan struct{}, opts.MaxConcurrentRestores),
		scripts: newScriptCache(DefaultScriptCacheSize)}
	if opts.Client != nil {
		w, err := newChildWatch(context.Background(), opts.Informers)
		if err != nil {
			return nil, fmt.Errorf("new runner: %w", err)
		}
		r.children = w
	}
	return r, nil
}

// Ensure starts the runner of s with tools running in pod, unless it has
// one (later calls are cheap), and offers it the messages of s not yet
// delivered. A runner that ended stays until Forget, so that its last
// progress reaches status first; the next Ensure after Forget starts a new
// one, which restores the session from its journal. It never blocks on the
// loop.
func (r *Runner) Ensure(s *agentsv1.AgentSession, pod string) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrShutdown
	}
	ss, ok := r.sessions[s.UID]
	if ok && ss.ended() {
		r.mu.Unlock()
		return nil // Forget it first (the controller does, once status has its progress)
	}
	if !ok {
		ss = newSession(r, s.DeepCopy(), pod)
		r.sessions[s.UID] = ss
		r.pods[types.NamespacedName{Namespace: s.Namespace, Name: pod}]++
	}
	r.mu.Unlock()
	if !ok {
		go ss.run()
	}
	ss.offer(s.Spec.Messages)
	return nil
}

// Progress returns the progress of the session with uid, if it has a runner.
func (r *Runner) Progress(uid types.UID) (Progress, bool) {
	r.mu.Lock()
	ss, ok := r.sessions[uid]
	r.mu.Unlock()
	if !ok {
		return Progress{}, false
	}
	return ss.snapshot(), true
}

// Running reports whether uid has a runner goroutine that has not ended.
func (r *Runner) Running(uid types.UID) bool {
	p, ok := r.Progress(uid)
	return ok && !p.Done
}

// Abort stops the session's loop: SESSION_END is journaled and the session
// ends Aborted. It does not wait; see Stop.
func (r *Runner) Abort(uid types.UID) {
	if ss := r.get(uid); ss != nil {
		ss.stop(stopAbort)
	}
}

// Suspend stops the session's loop without closing it in the journal, so a
// later Ensure resumes it.
func (r *Runner) Suspend(uid types.UID) {
	if ss := r.get(uid); ss != nil {
		ss.stop(stopDetach)
	}
}

// Wait blocks until the runner of uid has ended or ctx is done.
func (r *Runner) Wait(ctx context.Context, uid types.UID) error {
	ss := r.get(uid)
	if ss == nil {
		return nil
	}
	select {
	case <-ss.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Forget drops the state of an ended runner, so that a later Ensure starts a
// new one (after a suspension or once the session is deleted).
func (r *Runner) Forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ss, ok := r.sessions[uid]; ok {
		select {
		case <-ss.done:
			delete(r.sessions, uid)
		default:
		}
	}
}

// Shutdown detaches and stops every session (they resume from their journals
// on the next start) and waits for them until ctx ends.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	all := make([]*session, 0, len(r.sessions))
	for _, ss := range r.sessions {
		all = append(all, ss)
	}
	r.mu.Unlock()
	for _, ss := range all {
		ss.stop(stopDetach)
	}
	for _, ss := range all {
		select {
		case <-ss.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// acquireRestore waits for a restore slot until ctx ends.
func (r *Runner) acquireRestore(ctx context.Context) bool {
	select {
	case r.restores <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) releaseRestore() { <-r.restores }

// released counts the end of the runner s; the last runner of a pod closes
// the stream to it.
func (r *Runner) released(s *session) {
	key := types.NamespacedName{Namespace: s.obj.Namespace, Name: s.pod}
	r.mu.Lock()
	defer r.mu.Unlock() // a new runner of the pod must not open its stream before this one closes it
	r.pods[key]--
	if r.pods[key] > 0 {
		return
	}
	delete(r.pods, key)
	if r.opts.ReleaseEnv != nil {
		r.opts.ReleaseEnv(key.Namespace, key.Name)
	}
}

// Sessions is the number of runners that have not ended.
func (r *Runner) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ss := range r.sessions {
		if !ss.ended() {
			n++
		}
	}
	return n
}

func (r *Runner) get(uid types.UID) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[uid]
}
