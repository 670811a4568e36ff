package k8senv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Defaults of Config.
const (
	DefaultSidecarPath = "/agent/bin/executor-sidecar"
	DefaultRoot        = "/workspace"
	DefaultStderrLimit = 64 << 10
	DefaultDialTimeout = 30 * time.Second
)

// Mode selects how calls reach the sidecar.
type Mode int

const (
	// Persistent multiplexes all calls over one long-lived exec stream per
	// pod (the default).
	Persistent Mode = iota
	// PerCall opens one exec per call (like kubectl exec); for benchmarks.
	PerCall
)

// ErrPodMismatch is wrapped by errors for pods that are not the expected
// one (labels or owner differ).
var ErrPodMismatch = errors.New("pod is not the expected workspace pod")

// ErrPodNotReady is wrapped by errors for pods or containers not running.
var ErrPodNotReady = errors.New("pod is not running")

// Expect is what the pod must carry before a stream is opened to it.
type Expect struct {
	// Labels the pod must have, with these values.
	Labels map[string]string
	// OwnerUID, if set, must be the UID of one of the pod's ownerReferences.
	OwnerUID types.UID
}

// Target names a pod and what it must look like.
type Target struct {
	Namespace string
	Pod       string
	// Container is the container to exec into; empty means the pod's only
	// (or first) container.
	Container string
	Expect    Expect
	// Owner, when set, is presented with every call of the target (as the
	// call's owner on the pod's shared stream, or, with an executor that
	// predates call owners, in the hello of a stream of the target's own,
	// reconnects too): the sidecar then refuses the target's calls with
	// executor.ErrNotOwner once a newer driver of Owner.SessionUID used
	// the pod, and only those calls.
	Owner executor.Owner
}

func (t Target) key() string { return t.Namespace + "/" + t.Pod + "/" + t.Container }

// connKey identifies the stream of a target whose owner is presented in
// the hello (an executor without call owners): one per pod, container and
// owner. A target without an owner has the pod's shared stream.
func (t Target) connKey() string {
	if t.Owner.IsZero() {
		return t.key()
	}
	return fmt.Sprintf("%s/%s/%q/%d", t.key(), t.Owner.SessionUID, t.Owner.Holder, t.Owner.Epoch)
}

// Config configures a Pool.
type Config struct {
	// REST is the client configuration used for exec.
	REST *rest.Config
	// Client reads pods; if nil one is built from REST.
	Client kubernetes.Interface
	// SidecarPath is the executor binary in the container
	// (default DefaultSidecarPath).
	SidecarPath string
	// Root is the directory the sidecar confines file operations to and the
	// environment's working directory (default DefaultRoot).
	Root string
	// ServeArgs are extra arguments of `serve` (e.g. --env-policy all).
	ServeArgs []string
	// Mode is Persistent (default) or PerCall.
	Mode Mode
	// StderrLimit bounds the sidecar stderr kept for error messages
	// (default DefaultStderrLimit).
	StderrLimit int
	// DialTimeout bounds opening a stream and the handshake
	// (default DefaultDialTimeout).
	DialTimeout time.Duration
	// ReconnectTimeout is how long opening a stream retries while the API
	// server is unavailable (default DefaultReconnectTimeout; negative: no
	// retries).
	ReconnectTimeout time.Duration
	// StallTimeout is how long a frame from the sidecar may stay
	// half-received before the stream is failed as corrupt (default
	// executor.DefaultStallTimeout).
	StallTimeout time.Duration
	// Log receives stream lifecycle events.
	Log logr.Logger
	// OnReconnect, if set, is called with the pod's namespace each time a
	// stream that had broken was opened again.
	OnReconnect func(namespace string)
	// OnOpen, if set, is told how long each stage of opening a stream took
	// (StagePodCheck, then StageExecHandshake; or StagePodCheck, then
	// StageSpare for a stream taken over from the pod's spare), for streams
	// that opened. Opening a spare (Preopen) is not reported.
	OnOpen func(stage string, d time.Duration)
}

// Stages of opening a stream, as reported to Config.OnOpen.
const (
	// StagePodCheck is reading and checking the pod.
	StagePodCheck = "pod_check"
	// StageExecHandshake is opening the exec stream and the executor's
	// version handshake (its hello).
	StageExecHandshake = "exec_handshake"
	// StageSpare is taking over the pod's spare stream (Pool.Preopen) as
	// the pod's shared stream: one round trip that shows it alive, in
	// place of StageExecHandshake.
	StageSpare = "spare"
)

// Pool shares exec streams between environments using the same pod. It is
// safe for concurrent use.
type Pool struct {
	cfg    Config
	client kubernetes.Interface

	mu     sync.Mutex
	conns  map[string]*podConn
	spares map[string]*spare // by namespace/pod (spare.go)
	closed bool
}

// NewPool returns a pool; no connection is made until the first call.
func NewPool(cfg Config) (*Pool, error) {
	if cfg.REST == nil {
		return nil, errors.New("new pool: a REST config is required")
	}
	if cfg.SidecarPath == "" {
		cfg.SidecarPath = DefaultSidecarPath
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.StderrLimit <= 0 {
		cfg.StderrLimit = DefaultStderrLimit
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.ReconnectTimeout == 0 {
		cfg.ReconnectTimeout = DefaultReconnectTimeout
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	client := cfg.Client
	if client == nil {
		c, err := kubernetes.NewForConfig(cfg.REST)
		if err != nil {
			return nil, fmt.Errorf("new pool: %w", err)
		}
		client = c
	}
	return &Pool{cfg: cfg, client: client, conns: map[string]*podConn{}, spares: map[string]*spare{}}, nil
}

// Env returns the execution environment of target. Environments of the same
// pod and container share one stream, whatever their owners: each call
// carries its environment's owner (executor.ContextWithCallOwner). Only with
// an executor that predates call owners does an environment with an owner
// fall back to a stream of its own, shared with the environments of the
// same owner. After Close, environments fail with executor.ErrStreamClosed.
func (p *Pool) Env(target Target) *Env {
	shared := target
	shared.Owner = executor.Owner{}
	return &Env{pc: p.conn(shared), target: target}
}

// conn returns the podConn of t.connKey(), creating it (a closed one after
// Close).
func (p *Pool) conn(t Target) *podConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return &podConn{pool: p, target: t, closed: true, dialMu: make(chan struct{}, 1)}
	}
	pc := p.conns[t.connKey()]
	if pc == nil {
		pc = &podConn{pool: p, target: t, dialMu: make(chan struct{}, 1)}
		p.conns[t.connKey()] = pc
	}
	return pc
}

// Close closes every stream; environments of the pool then fail.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*podConn{}
	spares := p.spares
	p.spares = map[string]*spare{}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.close()
	}
	for _, sp := range spares {
		sp.close()
	}
	return nil
}

// Release closes the streams of one pod (e.g. when its session ended),
// its spare too.
func (p *Pool) Release(namespace, pod string) {
	p.DropSpare(namespace, pod)
	p.mu.Lock()
	var drop []*podConn
	for k, pc := range p.conns {
		if pc.target.Namespace == namespace && pc.target.Pod == pod {
			drop = append(drop, pc)
			delete(p.conns, k)
		}
	}
	p.mu.Unlock()
	for _, pc := range drop {
		pc.close()
	}
}

// podConn is the shared stream of one pod and container, or (with an
// executor that predates call owners) the stream of one owner there.
type podConn struct {
	pool *Pool
	// target names the pod, container and owner of the stream; its
	// Expect is not used: a stream is opened with the Expect of the
	// caller opening it (get).
	target Target

	dialMu chan struct{} // one dial at a time (a send holds it)
	mu     sync.Mutex
	client *executor.Client
	expect Expect // what the pod was checked against when client opened
	hello  executor.Hello
	closed bool
}

// get returns a live client and the Expect the pod was checked against when
// it opened, opening a stream (after checking the pod against expect) when
// there is none. Opening with the caller's expectations means a caller
// whose expectations the pod does not meet fails alone, and never keeps the
// others from opening the pod's stream.
func (pc *podConn) get(ctx context.Context, expect Expect) (*executor.Client, Expect, error) {
	pc.mu.Lock()
	c, checked, closed := pc.client, pc.expect, pc.closed
	pc.mu.Unlock()
	if closed {
		return nil, Expect{}, fmt.Errorf("%s: %w", pc.target.key(), executor.ErrStreamClosed)
	}
	if c != nil && c.Err() == nil {
		return c, checked, nil
	}
	if c != nil && errors.Is(c.Err(), executor.ErrFrameAuth) {
		// Bytes the sidecar did not send reached the stream (e.g. a
		// workspace process writing to it): the calls in flight failed and
		// this stream is never used again.
		pc.pool.cfg.Log.Info("executor stream failed authentication; opening a new one", "pod", pc.target.key(), "error", c.Err().Error())
	}
	// Under a Wait, a call waits for the stream (its own dial or another
	// caller's) past its deadline, and says it did not run if that passed.
	start := time.Now()
	wctx, stopWait := waitContext(ctx)
	defer stopWait()
	select {
	case pc.dialMu <- struct{}{}:
	case <-wctx.Done():
		return nil, Expect{}, fmt.Errorf("%s: waiting for the stream another call opens: %w", pc.target.key(), context.Cause(wctx))
	}
	defer func() { <-pc.dialMu }()
	pc.mu.Lock()
	c, checked = pc.client, pc.expect
	pc.mu.Unlock()
	if c != nil && c.Err() == nil {
		// Another caller reconnected.
		if err := notRun(ctx, pc.target.key(), start); err != nil {
			return nil, Expect{}, err
		}
		return c, checked, nil
	}
	t := pc.target
	t.Expect = expect
	c = nil
	if pc.pool.cfg.Mode == Persistent && t.Owner.IsZero() {
		c = pc.pool.takeOverSpare(wctx, t) // nil: no usable spare
	}
	if c == nil {
		var err error
		if c, err = pc.pool.openRetrying(wctx, t); err != nil {
			return nil, Expect{}, err
		}
	}
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		c.Close()
		return nil, Expect{}, fmt.Errorf("%s: %w", pc.target.key(), executor.ErrStreamClosed)
	}
	broken := pc.client != nil
	pc.client, pc.expect = c, expect
	pc.hello = c.ServerInfo()
	pc.mu.Unlock()
	if f := pc.pool.cfg.OnReconnect; broken && f != nil {
		f(pc.target.Namespace)
	}
	if err := notRun(ctx, pc.target.key(), start); err != nil {
		return nil, Expect{}, err // the stream stays for the next call
	}
	return c, expect, nil
}

func (pc *podConn) close() {
	pc.mu.Lock()
	pc.closed = true
	c := pc.client
	pc.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// openRetrying is open, retried while the API server is unavailable for up
// to Config.ReconnectTimeout, or as the Wait of ctx says (ContextWithWait;
// ctx is then waitContext's).
func (p *Pool) openRetrying(ctx context.Context, t Target) (*executor.Client, error) {
	if p.cfg.ReconnectTimeout < 0 {
		return p.open(ctx, t)
	}
	open := func(ctx context.Context) (*executor.Client, error) { return p.open(ctx, t) }
	w, ok := WaitFrom(ctx)
	if !ok {
		return retryTransient(ctx, p.cfg.ReconnectTimeout, reconnectInitialDelay, p.cfg.Log, "open exec stream to "+t.key(), open, nil)
	}
	budget := w.Tolerance
	if budget <= 0 {
		budget = p.cfg.ReconnectTimeout
	}
	failed := false
	c, err := retryTransient(ctx, budget, reconnectInitialDelay, p.cfg.Log, "open exec stream to "+t.key(), open,
		func(err error) {
			failed = true
			if w.Report != nil {
				w.Report(err)
			}
		})
	if err == nil && failed && w.Report != nil {
		w.Report(nil)
	}
	return c, err
}

// open checks the pod, opens an exec stream of `sidecar serve` and performs
// the handshake.
func (p *Pool) open(ctx context.Context, t Target) (*executor.Client, error) {
	start := time.Now()
	c, checked, err := p.dial(ctx, t)
	if err != nil {
		return nil, err
	}
	if f := p.cfg.OnOpen; f != nil {
		f(StagePodCheck, checked.Sub(start))
		f(StageExecHandshake, time.Since(checked))
	}
	return c, nil
}

// dial is open without reporting its stages; it returns when the pod check
// ended too.
func (p *Pool) dial(ctx context.Context, t Target) (*executor.Client, time.Time, error) {
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	container, err := p.checkPod(dctx, t)
	if err != nil {
		return nil, time.Time{}, err
	}
	checked := time.Now()
	cmd := append([]string{p.cfg.SidecarPath, "serve", "--root", p.cfg.Root}, p.cfg.ServeArgs...)
	ex, err := p.executor(t, container, cmd)
	if err != nil {
		return nil, time.Time{}, err
	}
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	stderr := newTailBuffer(p.cfg.StderrLimit)
	// The stream outlives the call that opened it.
	sctx, scancel := context.WithCancel(context.Background())
	go func() {
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{
			Stdin: stdinR, Stdout: stdoutW, Stderr: stderr, Tty: false,
		})
		cause := errors.New("exec stream ended")
		if err != nil {
			cause = fmt.Errorf("exec stream ended: %w", err)
		}
		if tail := stderr.String(); tail != "" {
			cause = fmt.Errorf("%w; sidecar stderr: %s", cause, tail)
		}
		p.cfg.Log.V(1).Info("exec stream ended", "pod", t.key(), "error", cause.Error())
		stdoutW.CloseWithError(cause)
		stdinR.CloseWithError(cause)
		scancel()
	}()
	rwc := &streamConn{r: stdoutR, w: stdinW, cancel: scancel}
	var opts []executor.ClientOption
	if p.cfg.StallTimeout > 0 {
		opts = append(opts, executor.WithStallTimeout(p.cfg.StallTimeout))
	}
	if !t.Owner.IsZero() {
		opts = append(opts, executor.WithOwner(t.Owner))
	}
	c, err := executor.NewClientContext(dctx, rwc, opts...)
	if err != nil {
		rwc.Close()
		return nil, time.Time{}, fmt.Errorf("open executor stream to %s: %w", t.key(), err)
	}
	p.cfg.Log.V(1).Info("exec stream opened", "pod", t.key(), "container", container)
	return c, checked, nil
}

// executor builds kubectl's exec wiring: WebSocket first, SPDY fallback.
func (p *Pool) executor(t Target, container string, cmd []string) (remotecommand.Executor, error) {
	u := p.client.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(t.Namespace).Name(t.Pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: cmd, Stdin: true, Stdout: true, Stderr: true, TTY: false,
		}, scheme.ParameterCodec).URL()
	return newExecutor(p.cfg.REST, u)
}

func newExecutor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("spdy executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("fallback executor: %w", err)
	}
	return ex, nil
}

// checkPod reads the pod and verifies it; it returns the container to use.
func (p *Pool) checkPod(ctx context.Context, t Target) (string, error) {
	pod, err := p.client.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get pod %s/%s: %w", t.Namespace, t.Pod, err)
	}
	return checkPod(pod, t)
}

func checkPod(pod *corev1.Pod, t Target) (string, error) {
	name := t.Namespace + "/" + t.Pod
	for k, v := range t.Expect.Labels {
		if got, ok := pod.Labels[k]; !ok || got != v {
			return "", fmt.Errorf("pod %s: label %s=%q, want %q: %w", name, k, got, v, ErrPodMismatch)
		}
	}
	if t.Expect.OwnerUID != "" {
		owned := false
		for _, o := range pod.OwnerReferences {
			if o.UID == t.Expect.OwnerUID {
				owned = true
			}
		}
		if !owned {
			return "", fmt.Errorf("pod %s: not owned by %s: %w", name, t.Expect.OwnerUID, ErrPodMismatch)
		}
	}
	if pod.DeletionTimestamp != nil {
		return "", fmt.Errorf("pod %s: being deleted: %w", name, ErrPodNotReady)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return "", fmt.Errorf("pod %s: phase %s: %w", name, pod.Status.Phase, ErrPodNotReady)
	}
	container := t.Container
	if container == "" {
		if len(pod.Spec.Containers) == 0 {
			return "", fmt.Errorf("pod %s: no containers: %w", name, ErrPodMismatch)
		}
		container = pod.Spec.Containers[0].Name
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			if cs.State.Running == nil {
				return "", fmt.Errorf("pod %s: container %s is not running: %w", name, container, ErrPodNotReady)
			}
			return container, nil
		}
	}
	return "", fmt.Errorf("pod %s: no status for container %s: %w", name, container, ErrPodNotReady)
}

// streamConn is the client side of an exec stream.
type streamConn struct {
	r      *io.PipeReader
	w      *io.PipeWriter
	cancel context.CancelFunc
	once   sync.Once
}

func (s *streamConn) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *streamConn) Write(p []byte) (int, error) { return s.w.Write(p) }

// Close half-closes stdin (the sidecar sees EOF, cancels its calls and
// exits) and then tears the stream down.
func (s *streamConn) Close() error {
	s.once.Do(func() {
		s.w.Close()
		s.r.Close()
		// Give the stdin close a moment to reach the sidecar before the
		// connection goes away.
		time.AfterFunc(2*time.Second, s.cancel)
	})
	return nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

var _ tool.ExecutionEnvironment = (*Env)(nil)
