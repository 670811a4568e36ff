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
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// DefaultNotifyInterval is the minimum time between two progress
// notifications of a session, except for phase changes and deliveries.
const DefaultNotifyInterval = 2 * time.Second

// EnvFactory returns the execution environment of a session whose workspace
// pod is pod. The manager uses K8sEnvFactory; envtest suites, which have no
// kubelet, use a LocalExecutionEnvironment in a temporary directory.
type EnvFactory func(ctx context.Context, s *agentsv1.AgentSession, pod string) (tool.ExecutionEnvironment, error)

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
}

// Runner manages one goroutine per active session. It is safe for concurrent
// use.
type Runner struct {
	opts Options

	children *childWatch // nil without Options.Client

	mu       sync.Mutex
	sessions map[types.UID]*session
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
	r := &Runner{opts: opts, sessions: map[types.UID]*session{}}
	if opts.Client != nil {
		w, err := newChildWatch(context.Background(), opts.Informers)
		if err != nil {
			return nil, fmt.Errorf("new runner: %w", err)
		}
		r.children = w
	}
	return r, nil
}

// Ensure starts the runner of s (once per UID; later calls are cheap) with
// tools running in pod, and offers it the messages of s not yet delivered.
// It never blocks on the loop.
func (r *Runner) Ensure(s *agentsv1.AgentSession, pod string) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrShutdown
	}
	ss, ok := r.sessions[s.UID]
	if !ok {
		ss = newSession(r, s.DeepCopy(), pod)
		r.sessions[s.UID] = ss
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

func (r *Runner) get(uid types.UID) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[uid]
}
