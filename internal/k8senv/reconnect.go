package k8senv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// DefaultReconnectTimeout is how long opening a stream keeps retrying while
// the API server is unreachable (Config.ReconnectTimeout).
const DefaultReconnectTimeout = 60 * time.Second

// reconnectInitialDelay is the first pause between attempts; it doubles up to
// reconnectMaxDelay.
const (
	reconnectInitialDelay = 250 * time.Millisecond
	reconnectMaxDelay     = 5 * time.Second
)

// transient reports whether err, from opening a stream under ctx, says that
// the API server or the way to it is unavailable for now (restarting,
// overloaded, connection refused or reset) rather than that the pod cannot be
// used (gone, forbidden, not ours).
func transient(ctx context.Context, err error) bool {
	switch {
	case err == nil || ctx.Err() != nil:
		return false
	case errors.Is(err, ErrPodMismatch) || errors.Is(err, context.Canceled):
		return false
	case apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err):
		return true
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		return true // the dial timed out, not the caller
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// retryTransient calls open until it succeeds, fails with an error that is
// not transient, ctx ends, or budget has passed since the first attempt; the
// pause between attempts starts at initial and doubles up to
// reconnectMaxDelay. A tool call made while the API server restarts thus
// waits for it instead of failing at once. onRetry, if set, is told each
// transient error before the pause that follows it.
func retryTransient[T any](ctx context.Context, budget, initial time.Duration, log logr.Logger, what string,
	open func(context.Context) (T, error), onRetry func(error)) (T, error) {
	deadline := time.Now().Add(budget)
	delay := initial
	for attempt := 1; ; attempt++ {
		v, err := open(ctx)
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// The caller gave up while open failed: say so, with why open failed.
			return v, fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		}
		if err == nil || !transient(ctx, err) {
			return v, err
		}
		if time.Now().Add(delay).After(deadline) {
			return v, fmt.Errorf("%s: still failing after %d attempts in %s: %w", what, attempt, budget, err)
		}
		log.Info("API server unavailable; retrying", "what", what, "attempt", attempt, "in", delay, "error", err.Error())
		if onRetry != nil {
			onRetry(err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, reconnectMaxDelay)
	}
}
