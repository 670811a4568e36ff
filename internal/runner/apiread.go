package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// steadyReader reads through Reader and, while the API server gives no
// answer (it is away, overloaded or timed out), reads again after a
// backoff until it answers or ctx ends. An answer, NotFound and Forbidden
// included, is returned at once.
//
// A session's start reads its Secrets and ConfigMaps (the API key, the
// script, skills, MCP headers) through it. Before, any failed read was a
// configuration error: an API server away for a moment failed the session
// with ConfigError, and an idle session that got a message then went from
// Succeeded to Failed. Now its start waits, like the journal's open.
type steadyReader struct {
	client.Reader
	log logr.Logger
	// backoff is the wait between reads (steadyReadBackoff when zero).
	backoff Backoff
}

// steadyReadBackoff is the wait between reads of an unanswered request.
var steadyReadBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// steadyReadLogEvery is how many unanswered reads in a row are logged once:
// an outage of an hour is not 720 log lines per session.
const steadyReadLogEvery = 12

func (r steadyReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	b := r.backoff
	if b.Initial <= 0 {
		b = steadyReadBackoff
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 && ctx.Err() != nil {
			// The wait and the end may be ready together, and select
			// picks either: a stopped runner reads no more.
			return fmt.Errorf("read %s: %w", key, ctx.Err())
		}
		err := r.Reader.Get(ctx, key, obj, opts...)
		if err == nil || !unanswered(err) || ctx.Err() != nil {
			return err
		}
		wait := b.next()
		if attempt%steadyReadLogEvery == 1 { // the first, then about once a minute
			r.log.Info("The API server did not answer a read of the session's configuration; reading again",
				"object", key.String(), "attempt", attempt, "in", wait.String(), "reason", err.Error())
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// unanswered reports whether err says the API server gave no answer to a
// request: it could not be reached, the connection broke, the request timed
// out, or the server was unavailable, overloaded or failed internally.
func unanswered(err error) bool {
	switch {
	case apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false // an answer: NotFound, Forbidden, Invalid, ...
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// reader is what the session's start reads its configuration through.
func (s *session) reader() client.Reader { return steadyReader{Reader: s.r.opts.Reader, log: s.log} }
