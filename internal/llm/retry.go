package llm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds how WithRetry retries a Client. Rate-limit, server and
// network errors are retried; every other error (authentication, permission,
// invalid request, context length, unknown) is returned at once.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first. Values
	// below 1 mean 1 (no retries).
	MaxAttempts int
	// InitialBackoff is the wait before the second attempt when the server
	// gives no Retry-After. Each further wait is multiplied by Multiplier
	// (2 when zero) and capped at MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
	// Jitter is the fraction (0..1) of each computed backoff that is
	// randomised: the wait is backoff·(1-Jitter·U[0,1)).
	Jitter float64
	// MaxElapsed bounds the whole call, waits included: no retry starts,
	// and no wait is begun, that would end after it. Zero means no bound
	// other than ctx.
	MaxElapsed time.Duration
	// MaxRetryAfter is the longest server-requested wait (Retry-After,
	// retry-after-ms, Gemini retryDelay) that is honoured; a longer one
	// ends retrying and returns the error. Zero means MaxBackoff, or one
	// minute when MaxBackoff is zero too.
	MaxRetryAfter time.Duration
	// OnRetry, if set, is called before each wait with the attempt that
	// failed (1-based), its error and the wait. It must not block.
	OnRetry func(attempt int, err error, wait time.Duration)
}

// DefaultRetryPolicy is 4 attempts, 1 s initial backoff doubling up to 30 s,
// 25 % jitter, Retry-After honoured up to 60 s, 5 minutes overall.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaxAttempts:    4,
		InitialBackoff: time.Second,
		MaxBackoff:     30 * time.Second,
		Multiplier:     2,
		Jitter:         0.25,
		MaxElapsed:     5 * time.Minute,
		MaxRetryAfter:  time.Minute,
	}
}

// IsZero reports whether p is the zero policy.
func (p RetryPolicy) IsZero() bool {
	return p.MaxAttempts == 0 && p.InitialBackoff == 0 && p.MaxBackoff == 0 && p.MaxElapsed == 0
}

// backoff is the wait after failed attempt n (1-based) when the server gave
// no Retry-After.
func (p RetryPolicy) backoff(n int) time.Duration {
	mult := p.Multiplier
	if mult <= 0 {
		mult = 2
	}
	d := float64(p.InitialBackoff)
	for i := 1; i < n; i++ {
		d *= mult
		if p.MaxBackoff > 0 && d >= float64(p.MaxBackoff) {
			d = float64(p.MaxBackoff)
			break
		}
	}
	if p.MaxBackoff > 0 && d > float64(p.MaxBackoff) {
		d = float64(p.MaxBackoff)
	}
	if p.Jitter > 0 {
		j := min(p.Jitter, 1)
		d *= 1 - j*rand.Float64()
	}
	return time.Duration(d)
}

func (p RetryPolicy) maxRetryAfter() time.Duration {
	switch {
	case p.MaxRetryAfter > 0:
		return p.MaxRetryAfter
	case p.MaxBackoff > 0:
		return p.MaxBackoff
	}
	return time.Minute
}

// wait decides whether to retry after failed attempt n with err, and how
// long to wait first. start is when the call began.
func (p RetryPolicy) wait(n int, err error, start time.Time) (time.Duration, bool) {
	if n >= p.MaxAttempts {
		return 0, false
	}
	var e *Error
	if !errors.As(err, &e) || !e.Retryable() {
		return 0, false
	}
	d := p.backoff(n)
	if e.RetryAfter > 0 {
		if e.RetryAfter > p.maxRetryAfter() {
			return 0, false
		}
		d = e.RetryAfter
	}
	if p.MaxElapsed > 0 && time.Since(start)+d >= p.MaxElapsed {
		return 0, false
	}
	return d, true
}

// WithRetry wraps c so that Complete and Stream retry rate-limit, server and
// network errors according to p. A stream cut after some of its events
// reached the caller is retried like one cut before: the caller first gets an
// EventRestart, which tells it to discard the partial attempt, then the events
// of the next attempt. ctx cancellation stops at once, also during a wait,
// and returns ctx's error.
func WithRetry(c Client, p RetryPolicy) Client {
	return &retryClient{next: c, policy: p}
}

type retryClient struct {
	next   Client
	policy RetryPolicy
}

func (r *retryClient) Complete(ctx context.Context, req *Request) (*Response, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		resp, err := r.next.Complete(ctx, req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d, ok := r.policy.wait(attempt, err, start)
		if !ok {
			return nil, afterAttempts(attempt, err)
		}
		if r.policy.OnRetry != nil {
			r.policy.OnRetry(attempt, err, d)
		}
		if err := sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

func (r *retryClient) Stream(ctx context.Context, req *Request) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		start := time.Now()
		for attempt := 1; ; attempt++ {
			delivered := false
			var failure error
			for ev, err := range r.next.Stream(ctx, req) {
				if err != nil {
					failure = err
					break
				}
				delivered = true
				if !yield(ev, nil) {
					return
				}
			}
			if failure == nil {
				return
			}
			if ctx.Err() != nil {
				yield(StreamEvent{}, ctx.Err())
				return
			}
			d, ok := r.policy.wait(attempt, failure, start)
			if !ok {
				yield(StreamEvent{}, afterAttempts(attempt, failure))
				return
			}
			if r.policy.OnRetry != nil {
				r.policy.OnRetry(attempt, failure, d)
			}
			if err := sleep(ctx, d); err != nil {
				yield(StreamEvent{}, err)
				return
			}
			if delivered && !yield(StreamEvent{Type: EventRestart}, nil) {
				return
			}
		}
	}
}

// afterAttempts returns the error that ended a call, prefixed with the number
// of attempts when there was more than one, so that whoever shows it (a
// session's status) also says the call was retried. errors.As still finds
// the *Error.
func afterAttempts(attempts int, err error) error {
	if attempts <= 1 {
		return err
	}
	return fmt.Errorf("after %d attempts: %w", attempts, err)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
