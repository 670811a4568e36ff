package k8senv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestTransient(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"nil", context.Background(), nil, false},
		{"connection refused", context.Background(), fmt.Errorf("get pod: %w", syscall.ECONNREFUSED), true},
		{"connection reset", context.Background(), fmt.Errorf("get pod: %w", syscall.ECONNRESET), true},
		{"unexpected EOF", context.Background(), fmt.Errorf("get pod: %w", io.ErrUnexpectedEOF), true},
		{"503", context.Background(), apierrors.NewServiceUnavailable("restarting"), true},
		{"429", context.Background(), apierrors.NewTooManyRequests("slow down", 1), true},
		{"dial timeout", context.Background(), fmt.Errorf("open: %w", context.DeadlineExceeded), true},
		{"pod not found", context.Background(), apierrors.NewNotFound(pods, "ws"), false},
		{"forbidden", context.Background(), apierrors.NewForbidden(pods, "ws", errors.New("no")), false},
		{"not our pod", context.Background(), fmt.Errorf("pod ns/ws: %w", ErrPodMismatch), false},
		{"caller cancelled", cancelled, fmt.Errorf("get pod: %w", syscall.ECONNREFUSED), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := transient(tc.ctx, tc.err); got != tc.want {
				t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRetryTransient(t *testing.T) {
	refused := fmt.Errorf("get pod: %w", syscall.ECONNREFUSED)
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "ws")
	cases := []struct {
		name      string
		budget    time.Duration
		errs      []error // returned by successive attempts; then success
		wantCalls int
		wantErr   error
	}{
		{"first attempt works", time.Second, nil, 1, nil},
		{"waits out an outage", time.Second, []error{refused, refused, refused}, 4, nil},
		{"a permanent error is returned at once", time.Second, []error{notFound, refused}, 1, notFound},
		{"gives up after the budget", 20 * time.Millisecond, []error{refused, refused, refused, refused, refused, refused}, 3, refused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			v, err := retryTransient(t.Context(), tc.budget, 5*time.Millisecond, logr.Discard(), "open",
				func(context.Context) (string, error) {
					calls++
					if calls <= len(tc.errs) {
						return "", tc.errs[calls-1]
					}
					return "stream", nil
				}, nil)
			if calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr == nil {
				if err != nil || v != "stream" {
					t.Errorf("= %q, %v; want the stream", v, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestRetryTransientStopsWhenTheCallerGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(context.Context) (int, error)
	}{
		{"while it waits", func(context.Context) (int, error) { return 0, syscall.ECONNREFUSED }},
		// On a loaded machine the deadline passes during an attempt (CI
		// saw the bare "connection refused").
		{"during an attempt", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, syscall.ECONNREFUSED }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			_, err := retryTransient(ctx, time.Hour, 10*time.Millisecond, logr.Discard(), "open", tc.open, nil)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("err = %v, want the caller's deadline and the last error", err)
			}
		})
	}
}

// A call made while the API server restarts waits for it rather than failing.
func TestCallWaitsForTheAPIServerToComeBack(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	if _, err := env.ExecCommand(t.Context(), "true", tool.ExecOptions{Timeout: time.Minute}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	h.unavailable.Store(3)
	h.dropConnections()
	// Wait until the client has seen its stream end, as a later tool call would.
	deadline := time.Now().Add(10 * time.Second)
	for {
		env.pc.mu.Lock()
		c := env.pc.client
		env.pc.mu.Unlock()
		if c.Err() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dropped stream was not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	gets := h.podGets.Load()
	res, err := env.ExecCommand(t.Context(), "echo back", tool.ExecOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("call during the outage: %v", err)
	}
	if strings.TrimSpace(res.Stdout) != "back" {
		t.Errorf("stdout = %q", res.Stdout)
	}
	// 3 refused, then the one that opened the stream, which also verified
	// the env (it expects what the stream was opened for).
	if n := h.podGets.Load() - gets; n != 4 {
		t.Errorf("pod GETs during the outage = %d, want 3 refused and 1 that worked", n)
	}
}

// A pod that is gone is not waited for.
func TestCallToAMissingPodFailsAtOnce(t *testing.T) {
	h := newHarness(t)
	target := h.target()
	target.Pod = "gone"
	_, err := newPool(t, h).Env(target).ExecCommand(t.Context(), "true", tool.ExecOptions{Timeout: time.Minute})
	if err == nil || !apierrors.IsNotFound(err) {
		t.Fatalf("err = %v, want NotFound", err)
	}
	if n := h.podGets.Load(); n != 1 {
		t.Errorf("pod GETs = %d, want 1", n)
	}
}
