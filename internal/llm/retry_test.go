package llm

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClient fails with errs[i] on attempt i (nil = answer).
type fakeClient struct {
	mu       sync.Mutex
	errs     []error
	attempts int
	// deltasBeforeErr is how many text deltas a failing stream yields
	// before its error.
	deltasBeforeErr int
}

func (f *fakeClient) next() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.attempts
	f.attempts++
	if i < len(f.errs) {
		return f.errs[i]
	}
	return nil
}

func (f *fakeClient) Complete(ctx context.Context, req *Request) (*Response, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return &Response{Message: TextMessage(RoleAssistant, "ok"), FinishReason: FinishStop}, nil
}

func (f *fakeClient) Stream(ctx context.Context, req *Request) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		err := f.next()
		if err != nil {
			for range f.deltasBeforeErr {
				if !yield(StreamEvent{Type: EventTextDelta, Delta: "x"}, nil) {
					return
				}
			}
			yield(StreamEvent{}, err)
			return
		}
		if !yield(StreamEvent{Type: EventTextDelta, Delta: "ok"}, nil) {
			return
		}
		yield(StreamEvent{Type: EventFinish, Response: &Response{Message: TextMessage(RoleAssistant, "ok")}}, nil)
	}
}

func fastPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
}

func TestRetryDecisions(t *testing.T) {
	rate := &Error{Kind: KindRateLimit, Provider: "p", StatusCode: 429}
	server := &Error{Kind: KindServer, Provider: "p", StatusCode: 500}
	network := &Error{Kind: KindNetwork}
	auth := &Error{Kind: KindAuthentication, Provider: "p", StatusCode: 401}
	invalid := &Error{Kind: KindInvalidRequest}
	ctxLen := &Error{Kind: KindContextLength}
	tests := []struct {
		name         string
		errs         []error
		wantAttempts int
		wantErr      error
		// wantMsg is the whole message of the returned error, when set.
		wantMsg string
	}{
		{"success at once", nil, 1, nil, ""},
		{"rate limit then success", []error{rate, rate}, 3, nil, ""},
		{"server then success", []error{server}, 2, nil, ""},
		{"network then success", []error{network}, 2, nil, ""},
		{"gives up after max attempts, saying how many", []error{server, server, server, server, server}, 4, server,
			"after 4 attempts: p: server error (HTTP 500)"},
		{"a non-retryable error after a retry says how many attempts", []error{rate, auth}, 2, auth,
			"after 2 attempts: p: authentication error (HTTP 401)"},
		{"authentication is never retried", []error{auth}, 1, auth, "p: authentication error (HTTP 401)"},
		{"invalid request is never retried", []error{invalid}, 1, invalid, ""},
		{"context length is never retried", []error{ctxLen}, 1, ctxLen, ""},
		{"plain errors are not retried", []error{errors.New("boom")}, 1, nil, "boom"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				f := &fakeClient{errs: tt.errs}
				c := WithRetry(f, fastPolicy())
				var err error
				if stream {
					for _, e := range c.Stream(t.Context(), &Request{}) {
						if e != nil {
							err = e
						}
					}
				} else {
					_, err = c.Complete(t.Context(), &Request{})
				}
				if f.attempts != tt.wantAttempts {
					t.Fatalf("attempts = %d, want %d", f.attempts, tt.wantAttempts)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantMsg != "" && (err == nil || err.Error() != tt.wantMsg) {
					t.Fatalf("err = %v, want the message %q", err, tt.wantMsg)
				}
				if tt.wantErr == nil && len(tt.errs) < tt.wantAttempts && err != nil {
					t.Fatalf("unexpected error %v", err)
				}
			})
		}
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	var waits []time.Duration
	p := RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Hour, MaxBackoff: time.Hour, MaxRetryAfter: time.Second,
		OnRetry: func(_ int, _ error, d time.Duration) { waits = append(waits, d) }}
	f := &fakeClient{errs: []error{&Error{Kind: KindRateLimit, RetryAfter: 5 * time.Millisecond}}}
	if _, err := WithRetry(f, p).Complete(t.Context(), &Request{}); err != nil {
		t.Fatal(err)
	}
	if len(waits) != 1 || waits[0] != 5*time.Millisecond {
		t.Fatalf("waits = %v, want [5ms]", waits)
	}
}

func TestRetryAfterAboveTheCapEndsRetrying(t *testing.T) {
	f := &fakeClient{errs: []error{&Error{Kind: KindRateLimit, RetryAfter: time.Hour}}}
	_, err := WithRetry(f, RetryPolicy{MaxAttempts: 3, MaxRetryAfter: time.Second}).Complete(t.Context(), &Request{})
	if KindOf(err) != KindRateLimit || f.attempts != 1 {
		t.Fatalf("err %v after %d attempts", err, f.attempts)
	}
}

func TestRetryDeadline(t *testing.T) {
	f := &fakeClient{errs: []error{&Error{Kind: KindServer}, &Error{Kind: KindServer}}}
	p := RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxElapsed: time.Minute}
	_, err := WithRetry(f, p).Complete(t.Context(), &Request{})
	if KindOf(err) != KindServer || f.attempts != 1 {
		t.Fatalf("a wait past MaxElapsed must not start: err %v after %d attempts", err, f.attempts)
	}
}

func TestStreamCutAfterEventsIsRetriedAfterARestart(t *testing.T) {
	cut := &Error{Kind: KindServer}
	f := &fakeClient{errs: []error{cut, cut, cut}, deltasBeforeErr: 2}
	var kinds []StreamEventType
	for ev, err := range WithRetry(f, fastPolicy()).Stream(t.Context(), &Request{}) {
		if err != nil {
			t.Fatalf("stream failed after %d attempts: %v", f.attempts, err)
		}
		kinds = append(kinds, ev.Type)
	}
	// Each cut attempt: two deltas, then a restart; the fourth answers.
	want := []StreamEventType{
		EventTextDelta, EventTextDelta, EventRestart,
		EventTextDelta, EventTextDelta, EventRestart,
		EventTextDelta, EventTextDelta, EventRestart,
		EventTextDelta, EventFinish,
	}
	if f.attempts != 4 || !slices.Equal(kinds, want) {
		t.Fatalf("%d attempts, events %v, want %v", f.attempts, kinds, want)
	}
}

func TestStreamCutAfterEventsEndsWithTheErrorWhenAttemptsRunOut(t *testing.T) {
	f := &fakeClient{errs: []error{&Error{Kind: KindServer}, &Error{Kind: KindServer}}, deltasBeforeErr: 1}
	p := fastPolicy()
	p.MaxAttempts = 2
	var got error
	restarts := 0
	for ev, err := range WithRetry(f, p).Stream(t.Context(), &Request{}) {
		if err != nil {
			got = err
			continue
		}
		if ev.Type == EventRestart {
			restarts++
		}
	}
	if KindOf(got) != KindServer || f.attempts != 2 || restarts != 1 {
		t.Fatalf("err %v, %d attempts, %d restarts", got, f.attempts, restarts)
	}
}

func TestStreamCutWithANonRetryableErrorIsNotRetried(t *testing.T) {
	f := &fakeClient{errs: []error{&Error{Kind: KindInvalidRequest}}, deltasBeforeErr: 1}
	var got error
	for _, err := range WithRetry(f, fastPolicy()).Stream(t.Context(), &Request{}) {
		if err != nil {
			got = err
		}
	}
	if KindOf(got) != KindInvalidRequest || f.attempts != 1 {
		t.Fatalf("err %v after %d attempts", got, f.attempts)
	}
}

func TestRetryStopsWhenContextIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p := RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour,
		OnRetry: func(int, error, time.Duration) { cancel() }}
	f := &fakeClient{errs: []error{&Error{Kind: KindServer}, &Error{Kind: KindServer}}}
	done := make(chan error, 1)
	go func() {
		_, err := WithRetry(f, p).Complete(ctx, &Request{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || f.attempts != 1 {
			t.Fatalf("err %v after %d attempts", err, f.attempts)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not stop on cancellation")
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	p := RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Jitter: 0.5}
	for n, max := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 300 * time.Millisecond, 10: 300 * time.Millisecond} {
		for range 50 {
			d := p.backoff(n)
			if d > max || d < max/2 {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, max/2, max)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, 7 * time.Second},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"milliseconds win", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"1"}}, 250 * time.Millisecond},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseRetryAfter(tt.header, now); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestKindForStatus(t *testing.T) {
	for code, want := range map[int]ErrorKind{401: KindAuthentication, 403: KindPermission, 429: KindRateLimit,
		400: KindInvalidRequest, 404: KindInvalidRequest, 413: KindContextLength, 500: KindServer, 503: KindServer, 529: KindServer, 200: KindUnknown} {
		if got := KindForStatus(code); got != want {
			t.Errorf("KindForStatus(%d) = %s, want %s", code, got, want)
		}
	}
}
