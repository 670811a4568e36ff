package k8senv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// reports collects what a Wait reports.
type reports struct {
	mu   sync.Mutex
	errs []error
}

func (r *reports) report(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reports) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// An API server unavailable for longer than Config.ReconnectTimeout fails a
// call made without a Wait; with one, the call waits it out, and the Wait
// hears of every failed attempt and then of the stream that opened.
func TestWaitOutlastsTheReconnectTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool
	}{
		{"without a wait the call fails", false},
		{"with a wait the call waits", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			env := newPool(t, h, func(c *Config) { c.ReconnectTimeout = 100 * time.Millisecond }).Env(h.target())
			h.unavailable.Store(3) // 250 ms + 500 ms + 1 s of pauses: past the 100 ms
			var rep reports
			ctx := t.Context()
			if tc.wait {
				ctx = ContextWithWait(ctx, Wait{Context: t.Context(), Tolerance: time.Minute, Report: rep.report})
			}
			res, err := env.ExecCommand(ctx, "echo ran", tool.ExecOptions{Timeout: time.Minute})
			if !tc.wait {
				if err == nil || !strings.Contains(err.Error(), "still failing") {
					t.Fatalf("err = %v, want the reconnect timeout's", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if strings.TrimSpace(res.Stdout) != "ran" {
				t.Errorf("stdout = %q", res.Stdout)
			}
			got := rep.get()
			if len(got) != 4 || got[3] != nil {
				t.Fatalf("reports = %v, want 3 errors, then nil", got)
			}
			for _, err := range got[:3] {
				if err == nil || !strings.Contains(err.Error(), "unable to handle the request") {
					t.Errorf("report = %v, want the API server's 503", err)
				}
			}
		})
	}
}

// A call whose own deadline (a tool's time limit) passes while it waits
// for the stream is not run, says so, and leaves the stream for the next
// call, which runs without opening another.
func TestCallPastItsDeadlineWhileWaitingDidNotRun(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	h.unavailable.Store(2) // 250 ms + 500 ms of pauses
	var rep reports
	life := ContextWithWait(t.Context(), Wait{Context: t.Context(), Tolerance: time.Minute, Report: rep.report})
	ctx, cancel := context.WithTimeout(life, 100*time.Millisecond)
	defer cancel()
	marker := filepath.Join(h.root, "ran")
	_, err := env.ExecCommand(ctx, "touch ran", tool.ExecOptions{Timeout: time.Minute})
	if !errors.Is(err, ErrCallNotRun) {
		t.Fatalf("err = %v, want ErrCallNotRun", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the call ran (stat: %v)", err)
	}
	if got := rep.get(); len(got) != 3 || got[2] != nil {
		t.Errorf("reports = %v, want 2 errors, then nil", got)
	}
	gets := h.podGets.Load()
	if _, err := env.ExecCommand(life, "touch ran", tool.ExecOptions{Timeout: time.Minute}); err != nil {
		t.Fatalf("call made again: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the call made again did not run: %v", err)
	}
	if n := h.podGets.Load() - gets; n != 0 {
		t.Errorf("pod GETs of the call made again = %d, want 0 (the stream opened by the wait)", n)
	}
}

// The wait ends with its Context (a stop, the session's deadline) however
// long the outage.
func TestWaitEndsWithItsContext(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	h.unavailable.Store(1 << 20)
	life, stop := context.WithCancel(t.Context())
	var rep reports
	ctx := ContextWithWait(t.Context(), Wait{Context: life, Tolerance: time.Hour, Report: func(err error) {
		rep.report(err)
		stop() // the session stops while the call waits
	}})
	_, err := env.ExecCommand(ctx, "true", tool.ExecOptions{Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the wait's end", err)
	}
	if len(rep.get()) != 1 {
		t.Errorf("reports = %v, want the one before the stop", rep.get())
	}
}

// A call waiting for the stream another call is opening gives up when it is
// canceled, without waiting for that other call.
func TestCallWaitingForAnotherCallsDialCanBeCanceled(t *testing.T) {
	h := newHarness(t)
	env := newPool(t, h).Env(h.target())
	h.unavailable.Store(1 << 20)
	dialing := make(chan struct{})
	var once sync.Once
	first := make(chan error, 1)
	go func() {
		ctx := ContextWithWait(t.Context(), Wait{Context: t.Context(), Tolerance: time.Hour,
			Report: func(error) { once.Do(func() { close(dialing) }) }})
		_, err := env.ExecCommand(ctx, "true", tool.ExecOptions{Timeout: time.Minute})
		first <- err
	}()
	<-dialing
	ctx, cancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, err := env.ExecCommand(ctx, "true", tool.ExecOptions{Timeout: time.Minute})
		second <- err
	}()
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Errorf("second call: err = %v, want canceled", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first call ended (%v) before the outage did", err)
	default:
	}
	h.unavailable.Store(0)
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
}
