package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

func TestUnanswered(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/api/v1/namespaces/a/configmaps/b",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"connection refused, wrapped as a configuration error", fmt.Errorf("%w: get script configmap b: %w", ErrConfig, refused), true},
		{"connection cut mid-answer", io.ErrUnexpectedEOF, true},
		{"service unavailable", apierrors.NewServiceUnavailable("etcd is away"), true},
		{"server timeout", apierrors.NewServerTimeout(cm, "get", 1), true},
		{"request timeout", apierrors.NewTimeoutError("slow", 1), true},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), true},
		{"internal error", apierrors.NewInternalError(errors.New("boom")), true},
		{"not found", apierrors.NewNotFound(cm, "b"), false},
		{"not found, wrapped", fmt.Errorf("%w: get script configmap b: %w", ErrConfig, apierrors.NewNotFound(cm, "b")), false},
		{"forbidden", apierrors.NewForbidden(cm, "b", errors.New("no")), false},
		{"a key missing", fmt.Errorf("%w: configmap b has no key %q", ErrConfig, "script.yaml"), false},
		{"our own context ended", context.Canceled, false},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("%s: unanswered %t, want %t (%v)", tc.name, got, tc.want, tc.err)
		}
	}
}

// TestStartWaitsForAnAPIServerThatIsAway starts a session while the
// manager's API server does not answer (nothing listens at its address):
// the session's start waits instead of failing with ConfigError, and runs
// to its end once the API server is back at that address (a TCP relay to a
// real API server, started a moment later).
func TestStartWaitsForAnAPIServerThatIsAway(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	api, cfg := apiServer(t)
	cm := doneScript(t, api, "away")
	reads, addr := awayReader(t, cfg) // nothing listens there until the relay starts
	r, obj := startScriptSession(t, Options{Reader: reads, Journals: pub}, cm.Name, "uid-away")
	waitUnanswered(t, r, obj.UID, reads)
	if p, ok := r.Progress(obj.UID); !ok || p.Done {
		t.Fatalf("the session ended while the API server was away: phase %s, reason %s, error %q", p.Phase, p.Reason, p.Error)
	}
	relay(t, addr, cfg.Host)
	end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Done })
	if end.Phase != agentsv1.PhaseSucceeded {
		t.Fatalf("phase %s (%s: %s), want Succeeded", end.Phase, end.Reason, end.Error)
	}
}

// countedReads counts the reads through it.
type countedReads struct {
	client.Reader
	n atomic.Int32
}

func (c *countedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// awayReader reads with cfg's credentials from an address nothing listens
// at (yet), which it returns.
func awayReader(t *testing.T, cfg *rest.Config) (*countedReads, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	away := rest.CopyConfig(cfg)
	away.Host = "https://" + addr
	reader, err := client.New(away, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &countedReads{Reader: reader}, addr
}

// waitUnanswered waits until three reads went unanswered, or the session's
// runner ended (which the caller then reports).
func waitUnanswered(t *testing.T, r *Runner, uid types.UID, reads *countedReads) {
	t.Helper()
	testenv.Eventually(t, "three unanswered reads", 30*time.Second, func() error {
		if p, ok := r.Progress(uid); ok && p.Done {
			return nil
		}
		if n := reads.n.Load(); n < 3 {
			return fmt.Errorf("%d reads so far", n)
		}
		return nil
	})
}

// TestStopDuringAnAPIOutageEndsTheRunner: a session stopped (deleted,
// aborted) while its start waits for an API server that does not answer
// ends at once, and reads no more: an outage of an hour does not keep a
// runner of a deleted session reading.
func TestStopDuringAnAPIOutageEndsTheRunner(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	_, cfg := apiServer(t)
	reads, _ := awayReader(t, cfg)
	r, obj := startScriptSession(t, Options{Reader: reads, Journals: pub}, "never-read", "uid-stopped")
	waitUnanswered(t, r, obj.UID, reads)
	if p, _ := r.Progress(obj.UID); p.Done {
		t.Fatalf("the session ended before it was stopped: phase %s, error %q", p.Phase, p.Error)
	}
	r.Abort(obj.UID)
	waitProgress(t, r, obj.UID, "the stopped runner ended", func(p Progress) bool { return p.Done })
	n := reads.n.Load()
	// A runner still reading would read again within the longest backoff
	// (5 s): watch a little longer than that.
	for end := time.Now().Add(steadyReadBackoff.Max + 500*time.Millisecond); time.Now().Before(end); {
		if m := reads.n.Load(); m != n {
			t.Fatalf("%d reads after the runner ended", m-n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// relay listens at addr and copies every connection to and from the host
// of target (an https URL), until the test ends.
func relay(t *testing.T, addr, target string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("relay at %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
}

// TestReadAheadEndsWithARunnerWithoutTheClaim: a runner that finds its
// session claimed by another install ends, and its read ahead of the
// session's configuration, which an API server that does not answer would
// keep going, ends with it and frees its slot.
func TestReadAheadEndsWithARunnerWithoutTheClaim(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	api, _ := apiServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there: reads of the configuration get no answer
	away, err := client.New(&rest.Config{Host: "https://" + addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obj := scriptedSession("away", "")
	obj.UID = "uid-foreign"
	other := &claim.Claims{Client: api, Reader: api, Me: claim.Holder{Install: "other/agent-operator", Pod: "other-0"}}
	if _, err := other.Acquire(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	r, _ := startScriptSession(t, Options{Reader: away, Journals: pub,
		Claims: &claim.Claims{Client: api, Reader: api, Me: claim.Holder{Install: "ahead/agent-operator", Pod: "ahead-0"}}},
		"away", obj.UID)
	end := waitProgress(t, r, obj.UID, "the runner ended", func(p Progress) bool { return p.Done })
	if end.Foreign == "" {
		t.Fatalf("the runner ended without finding the other install's claim: %+v", end)
	}
	testenv.Eventually(t, "the read ahead ended and freed its slot", 10*time.Second, func() error {
		if n := len(r.early); n != 0 {
			return fmt.Errorf("%d reads ahead still running", n)
		}
		return nil
	})
}

// attempts counts the reads through it and cancels after stopAfter.
type attempts struct {
	client.Reader
	n         int
	stopAfter int
	cancel    context.CancelFunc
}

func (a *attempts) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	a.n++
	if a.n == a.stopAfter {
		a.cancel()
	}
	return a.Reader.Get(ctx, key, obj, opts...)
}

// TestSteadyReadLogsAnOutageSparingly: reads that an API server nobody
// listens for does not answer are made again until the context ends, and
// the manager logs the first and then one in steadyReadLogEvery, not each.
func TestSteadyReadLogsAnOutageSparingly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	away, err := client.New(&rest.Config{Host: "https://" + addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reads := &attempts{Reader: away, stopAfter: 2*steadyReadLogEvery + 1, cancel: cancel}
	lines := 0
	r := steadyReader{Reader: reads, log: funcr.New(func(string, string) { lines++ }, funcr.Options{}),
		backoff: Backoff{Initial: time.Millisecond, Max: time.Millisecond}}
	err = r.Get(ctx, client.ObjectKey{Namespace: "a", Name: "b"}, &corev1.ConfigMap{})
	if err == nil || !unanswered(err) {
		t.Fatalf("error %v, want the last unanswered read's", err)
	}
	if reads.n != reads.stopAfter {
		t.Errorf("%d reads, want %d (until the context ended)", reads.n, reads.stopAfter)
	}
	if want := 2; lines != want { // attempts 1 and 13; the 25th ended with the context
		t.Errorf("%d log lines for %d unanswered reads, want %d", lines, reads.n, want)
	}
}
