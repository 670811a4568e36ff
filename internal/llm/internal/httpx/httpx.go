package httpx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// IdleError reports a stream that sent no bytes for After.
type IdleError struct{ After time.Duration }

func (e *IdleError) Error() string { return fmt.Sprintf("stream idle: no data for %s", e.After) }

// ErrTooLarge reports a response body above the Watch's MaxBytes.
var ErrTooLarge = errors.New("response body exceeds the size limit")

// Watch is the per-request state of a watched response body. Put it in the
// request context with WithWatch; the Transport then wraps the body.
type Watch struct {
	// Idle ends the body when no bytes arrive for this long (0: never).
	Idle time.Duration
	// MaxBytes ends the body when more than this many bytes arrive (0: no cap).
	MaxBytes int64
	// Quiet makes read failures look like io.EOF to the reader (the SDK)
	// while Err still reports them; for SDKs that log read errors to the
	// global logger.
	Quiet bool

	mu  sync.Mutex
	err error
}

// Err is the first failure seen on the body: an *IdleError, ErrTooLarge or
// the transport's read error. It is nil while the body reads cleanly.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Watch) fail(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
	return w.err
}

type watchKey struct{}

// WithWatch returns ctx carrying w.
func WithWatch(ctx context.Context, w *Watch) context.Context {
	return context.WithValue(ctx, watchKey{}, w)
}

// Transport wraps Base (http.DefaultTransport when nil).
type Transport struct {
	Base http.RoundTripper
	// DropHeaders are removed from every request before it is sent.
	DropHeaders []string
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if len(t.DropHeaders) > 0 {
		req = req.Clone(req.Context())
		for _, h := range t.DropHeaders {
			req.Header.Del(h)
		}
	}
	w, ok := req.Context().Value(watchKey{}).(*Watch)
	if !ok || w == nil {
		return base.RoundTrip(req)
	}
	// The idle limit also bounds the wait for the response headers.
	ctx, cancel := context.WithCancel(req.Context())
	req = req.WithContext(ctx)
	var timer *time.Timer
	if w.Idle > 0 {
		timer = time.AfterFunc(w.Idle, func() {
			w.fail(&IdleError{After: w.Idle})
			cancel()
		})
	}
	resp, err := base.RoundTrip(req)
	if timer != nil && !timer.Stop() {
		// The timer fired: the request was cancelled for idleness.
		if err == nil && resp.Body != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, w.Err()
	}
	if err != nil {
		cancel()
		return resp, err
	}
	if resp.Body == nil {
		cancel()
		return resp, nil
	}
	resp.Body = newBody(resp.Body, w, cancel)
	return resp, nil
}

// Client returns a copy of base (a new default client when nil) whose
// transport is wrapped in a Transport dropping dropHeaders.
func Client(base *http.Client, dropHeaders ...string) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	c.Transport = &Transport{Base: c.Transport, DropHeaders: dropHeaders}
	return c
}

type body struct {
	rc     io.ReadCloser
	w      *Watch
	cancel context.CancelFunc
	timer  *time.Timer
	n      int64
	once   sync.Once
}

func newBody(rc io.ReadCloser, w *Watch, cancel context.CancelFunc) *body {
	b := &body{rc: rc, w: w, cancel: cancel}
	if w.Idle > 0 {
		b.timer = time.AfterFunc(w.Idle, func() {
			w.fail(&IdleError{After: w.Idle})
			rc.Close()
		})
	}
	return b
}

func (b *body) Read(p []byte) (int, error) {
	if err := b.w.Err(); err != nil {
		return 0, b.report(err)
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		if b.timer != nil {
			b.timer.Reset(b.w.Idle)
		}
		b.n += int64(n)
		if b.w.MaxBytes > 0 && b.n > b.w.MaxBytes {
			b.w.fail(ErrTooLarge)
			b.rc.Close()
			return n, b.report(ErrTooLarge)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, b.report(b.w.fail(err))
	}
	if err != nil {
		if werr := b.w.Err(); werr != nil {
			return n, b.report(werr)
		}
	}
	return n, err
}

func (b *body) report(err error) error {
	if b.w.Quiet {
		return io.EOF
	}
	return err
}

func (b *body) Close() error {
	var err error
	b.once.Do(func() {
		if b.timer != nil {
			b.timer.Stop()
		}
		err = b.rc.Close()
		b.cancel()
	})
	return err
}
