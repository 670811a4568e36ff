package k8senv

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Wait is how the calls made under a context (ContextWithWait) wait for
// their pod's stream while the API server, or the way through it to the
// pod, is unavailable: up to Tolerance instead of Config.ReconnectTimeout,
// for as long as Context lives, and past the deadline of the call's own
// context. A tool's time limit is for running it; an outage of the API
// server should not use it up while nothing can run. The runner gives each
// input of a session one, so a session waits out an API server outage at
// its tool calls as it waits out a model outage at its model calls, instead
// of handing the model one failed call after another.
type Wait struct {
	// Context is what the wait lives by (the session's input: its end, by
	// a stop or by the session's working-time deadline, ends the wait).
	// The call's context ends the wait only when it is canceled; its
	// deadline does not.
	Context context.Context
	// Tolerance is how long one call waits at most (default
	// Config.ReconnectTimeout); then it fails as without a Wait.
	Tolerance time.Duration
	// Report, if set, is told the error of each attempt that failed while
	// the call waits, and nil once a stream opened after one did.
	Report func(err error)
}

type waitKey struct{}

// ContextWithWait returns ctx whose calls wait for their pod's stream as w
// says.
func ContextWithWait(ctx context.Context, w Wait) context.Context {
	return context.WithValue(ctx, waitKey{}, w)
}

// WaitFrom returns the Wait of ctx, if it has one with a Context, for an
// environment other than a Pool's to wait the same way.
func WaitFrom(ctx context.Context) (Wait, bool) {
	w, ok := ctx.Value(waitKey{}).(Wait)
	return w, ok && w.Context != nil
}

// ErrCallNotRun is wrapped by the error of a call whose own deadline passed
// while it waited for its pod's stream (a Wait): the stream is open now and
// nothing of the call ran, so it can be made again as it was.
var ErrCallNotRun = errors.New("the call did not run; the workspace can be reached again, so it can be made again as it was")

// waitContext returns the context to open a stream under for a call made
// under ctx: ctx itself without a Wait; with one, a context that ends with
// the Wait's Context or when ctx is canceled, not at ctx's deadline. stop
// releases it.
func waitContext(ctx context.Context) (wctx context.Context, stop func()) {
	w, ok := WaitFrom(ctx)
	if !ok {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stopLife := context.AfterFunc(w.Context, func() { cancel(context.Cause(w.Context)) })
	stopCall := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel(context.Cause(ctx))
		}
	})
	return wctx, func() {
		stopLife()
		stopCall()
		cancel(nil)
	}
}

// notRun is the error of a call made under ctx that waited for its stream
// since start: ErrCallNotRun when ctx's deadline passed meanwhile (the wait
// ignored it), else nil and the call goes on.
func notRun(ctx context.Context, key string, start time.Time) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil
	}
	return fmt.Errorf("%s: waited %s for the workspace's executor stream (the Kubernetes API server, or the way through it to the pod, was unavailable), past the call's time limit: %w",
		key, time.Since(start).Round(time.Second), ErrCallNotRun)
}
