package httpx

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestWatchedBody(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Secret") != "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/no-headers" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		io.WriteString(w, strings.Repeat("a", 100))
		w.(http.Flusher).Flush()
		if r.URL.Path == "/stall" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer srv.Close()
	defer close(release)
	c := Client(nil, "X-Secret")
	tests := []struct {
		name    string
		path    string
		idle    time.Duration
		max     int64
		wantErr func(error) bool
		quiet   bool
	}{
		{"idle stream fails with IdleError", "/stall", 200 * time.Millisecond, 0, func(err error) bool { var ie *IdleError; return errors.As(err, &ie) }, false},
		{"quiet hides the failure from the reader", "/stall", 200 * time.Millisecond, 0, func(err error) bool { return err == nil }, true},
		{"size cap", "/", 0, 10, func(err error) bool { return errors.Is(err, ErrTooLarge) }, false},
		{"no response headers within the idle limit", "/no-headers", 20 * time.Millisecond, 0, nil, false},
		{"clean body", "/", time.Second, 0, func(err error) bool { return err == nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &Watch{Idle: tt.idle, MaxBytes: tt.max, Quiet: tt.quiet}
			req, _ := http.NewRequestWithContext(WithWatch(t.Context(), w), http.MethodGet, srv.URL+tt.path, nil)
			req.Header.Set("X-Secret", "dropped")
			resp, err := c.Do(req)
			if tt.path == "/no-headers" {
				var ie *IdleError
				if !errors.As(err, &ie) {
					t.Fatalf("err = %v, want an IdleError while waiting for headers", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: the header was not dropped", resp.StatusCode)
			}
			_, err = io.ReadAll(resp.Body)
			if !tt.wantErr(err) {
				t.Fatalf("read error = %v", err)
			}
			if tt.quiet {
				var ie *IdleError
				if !errors.As(w.Err(), &ie) {
					t.Fatalf("Watch.Err() = %v, want the idle error", w.Err())
				}
			}
		})
	}
}
