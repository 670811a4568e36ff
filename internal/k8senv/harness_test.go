package k8senv

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/proctest"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	crirc "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
)

// sidecarBinary is the executor-sidecar built for the tests; the harness
// runs it as the "container" process.
var sidecarBinary string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		// The harness runs this test binary as an executor that predates
		// call owners (oldExecutorConfig).
		os.Exit(serveOldExecutor(os.Args[2:]))
	}
	// client-go and spdystream log expected connection teardown noise.
	klog.SetLogger(logr.Discard())
	bin, cleanup, err := proctest.Build("github.com/agent-operator/agent-operator/cmd/executor-sidecar", "executor-sidecar")
	if err != nil {
		panic(err)
	}
	sidecarBinary = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// harness is an in-process fake of the API server and kubelet exec path:
// pod GETs come from a small handler; exec is served by the kubelet's real
// streaming code (k8s.io/cri-streaming ServeExec, SPDY) behind the API
// server's real WebSocket→SPDY translator (k8s.io/apiserver), running the
// command as a local process.
type harness struct {
	t       *testing.T
	api     *httptest.Server
	kubelet *httptest.Server
	root    string

	// legacy answers WebSocket upgrades with 403 like an API server < 1.30.
	legacy atomic.Bool

	mu    sync.Mutex
	pods  map[string]*corev1.Pod
	procs []*os.Process
	conns []net.Conn
	outs  []*lockedWriter // stdout of every "container" process

	// unavailable is how many of the next pod GETs are answered 503, like an
	// API server that is restarting.
	unavailable atomic.Int32

	websocketExecs atomic.Int32
	spdyExecs      atomic.Int32
	podGets        atomic.Int32
}

func newHarness(t testing.TB) *harness {
	h := &harness{pods: map[string]*corev1.Pod{}}
	if tt, ok := t.(*testing.T); ok {
		h.t = tt
	}
	h.root = t.TempDir()
	h.kubelet = httptest.NewServer(http.HandlerFunc(h.serveKubeletExec))
	h.api = httptest.NewUnstartedServer(http.HandlerFunc(h.serveAPI))
	h.api.Listener = &trackingListener{Listener: h.api.Listener, h: h}
	h.api.Start()
	t.Cleanup(func() {
		h.api.CloseClientConnections()
		h.api.Close()
		h.kubelet.CloseClientConnections()
		h.kubelet.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range h.procs {
			_ = p.Kill()
		}
	})
	h.addPod(runningPod("ns", "ws-1"))
	return h
}

func runningPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: "pod-uid",
			Labels:          map[string]string{"agent-operator.dev/session": "s1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "agent-operator.dev/v1alpha1", Kind: "AgentSession", Name: "s1", UID: "owner-uid"}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "workspace", Image: "agent-operator/workspace:dev"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "workspace", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}},
		},
	}
}

func (h *harness) addPod(p *corev1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pods[p.Namespace+"/"+p.Name] = p
}

func (h *harness) restConfig() *rest.Config {
	// No client-side throttling: per-call mode GETs the pod for every call.
	return &rest.Config{Host: h.api.URL, QPS: 1000, Burst: 1000}
}

func (h *harness) config() Config {
	return Config{REST: h.restConfig(), SidecarPath: sidecarBinary, Root: h.root, DialTimeout: 10 * time.Second}
}

func (h *harness) target() Target {
	return Target{Namespace: "ns", Pod: "ws-1", Expect: Expect{
		Labels: map[string]string{"agent-operator.dev/session": "s1"}, OwnerUID: "owner-uid",
	}}
}

// dropConnections closes every client connection of the API server,
// including hijacked (upgraded) ones, like a network failure.
func (h *harness) dropConnections() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

type trackingListener struct {
	net.Listener
	h *harness
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.h.mu.Lock()
		l.h.conns = append(l.h.conns, c)
		l.h.mu.Unlock()
	}
	return c, err
}

// killSidecars kills every "container" process started so far.
func (h *harness) killSidecars() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.procs {
		_ = p.Kill()
	}
}

func (h *harness) serveAPI(w http.ResponseWriter, r *http.Request) {
	// /api/v1/namespaces/{ns}/pods/{pod}[/exec]
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 6 || parts[0] != "api" || parts[2] != "namespaces" || parts[4] != "pods" {
		http.NotFound(w, r)
		return
	}
	key := parts[3] + "/" + parts[5]
	if len(parts) == 6 && r.Method == http.MethodGet {
		h.podGets.Add(1)
		if h.unavailable.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status:   metav1.StatusFailure, Reason: metav1.StatusReasonServiceUnavailable, Code: 503,
				Message: "the server is currently unable to handle the request",
			})
			return
		}
		h.mu.Lock()
		pod := h.pods[key]
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if pod == nil {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status:   metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: 404,
				Message: "pods \"" + parts[5] + "\" not found",
			})
			return
		}
		json.NewEncoder(w).Encode(pod)
		return
	}
	if len(parts) == 7 && parts[6] == "exec" {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			if h.legacy.Load() {
				http.Error(w, "websocket exec not supported", http.StatusForbidden)
				return
			}
			h.websocketExecs.Add(1)
			q := r.URL.Query()
			loc, _ := url.Parse(h.kubelet.URL + r.URL.Path + "?" + r.URL.RawQuery)
			proxy.NewStreamTranslatorHandler(loc, nil, 0, proxy.Options{
				Stdin: q.Get("stdin") == "true", Stdout: q.Get("stdout") == "true",
				Stderr: q.Get("stderr") == "true", Tty: q.Get("tty") == "true",
			}).ServeHTTP(w, r)
			return
		}
		h.spdyExecs.Add(1)
		h.serveKubeletExec(w, r)
		return
	}
	http.NotFound(w, r)
}

// serveKubeletExec is the kubelet side: SPDY v1–v4 only (no v5 over SPDY).
func (h *harness) serveKubeletExec(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := &crirc.Options{
		Stdin: q.Get("stdin") == "true", Stdout: q.Get("stdout") == "true",
		Stderr: q.Get("stderr") == "true", TTY: q.Get("tty") == "true",
	}
	crirc.ServeExec(w, r, localContainer{h}, "ws-1", "pod-uid", q.Get("container"), q["command"], opts,
		4*time.Hour, 30*time.Second, crirc.SupportedStreamingProtocols)
}

// localContainer runs exec'd commands as local processes. Like a real
// runtime it does not kill them when the client goes away: only the end of
// stdin tells the sidecar to stop.
type localContainer struct{ h *harness }

func (c localContainer) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan crirc.TerminalSize, timeout time.Duration) error {
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	p := exec.Command(cmd[0], cmd[1:]...)
	// Stdin through our own pipe: like a container runtime, the end of the
	// process ends the exec even while the client's stdin stays open.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer stdinW.Close()
	stdout := &lockedWriter{w: out}
	p.Stdin, p.Stdout, p.Stderr = stdinR, stdout, errw
	if err := p.Start(); err != nil {
		stdinR.Close()
		return err
	}
	stdinR.Close()
	if in != nil {
		go func() {
			_, _ = io.Copy(stdinW, in)
			stdinW.Close()
		}()
	}
	c.h.mu.Lock()
	c.h.procs = append(c.h.procs, p.Process)
	c.h.outs = append(c.h.outs, stdout)
	c.h.mu.Unlock()
	err = p.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
	}
	return err
}

// lockedWriter serialises the process's output with injected bytes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// injectStdout writes b into the stdout stream of every "container" process
// started so far, like a workspace process writing to the sidecar's stdout.
func (h *harness) injectStdout(b []byte) {
	h.mu.Lock()
	outs := h.outs
	h.mu.Unlock()
	for _, o := range outs {
		_, _ = o.Write(b)
	}
}
