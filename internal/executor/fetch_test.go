package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/webfetch"
)

// withoutFetch hides the Fetcher of the environment it wraps, like the
// environment of an executor that predates the fetch op.
type withoutFetch struct{ tool.ExecutionEnvironment }

// serveEnv serves env over pipes and returns a client of it.
func serveEnv(t *testing.T, env tool.ExecutionEnvironment) *Client {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := Serve(context.Background(), sr, sw, env, ServeOptions{OwnerDir: t.TempDir()})
		sw.Close()
		done <- err
	}()
	c, err := NewClientContext(t.Context(), &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the client closed")
		}
	})
	return c
}

func TestFetchOverStream(t *testing.T) {
	const page = "<h1>Hello</h1><script>nope()</script><p>world</p>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			<-r.Context().Done()
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("x", 4096))
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, page)
		}
	}))
	t.Cleanup(srv.Close)
	env, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	c := serveEnv(t, env)
	old := serveEnv(t, withoutFetch{env})

	tests := []struct {
		name    string
		client  *Client
		req     tool.FetchRequest
		want    *tool.FetchResult
		wantErr error
		errMsg  string
	}{
		{
			name: "html converted in the executor", client: c,
			req:  tool.FetchRequest{URL: srv.URL + "/page", AllowPrivate: true},
			want: &tool.FetchResult{URL: srv.URL + "/page", Status: 200, ContentType: "text/html", Text: "# Hello\n\nworld\n", Bytes: int64(len(page))},
		},
		{
			name: "body cut at maxBytes", client: c,
			req:  tool.FetchRequest{URL: srv.URL + "/big", AllowPrivate: true, MaxBytes: 100},
			want: &tool.FetchResult{URL: srv.URL + "/big", Status: 200, ContentType: "text/plain", Text: strings.Repeat("x", 100), Truncated: true, Bytes: 100},
		},
		{
			name: "private address refused", client: c,
			req:     tool.FetchRequest{URL: srv.URL + "/page"},
			wantErr: nil, errMsg: "loopback address",
		},
		{
			name: "timeout is a deadline error", client: c,
			req:     tool.FetchRequest{URL: srv.URL + "/slow", AllowPrivate: true, Timeout: 100 * time.Millisecond},
			wantErr: context.DeadlineExceeded, errMsg: "longer than 100ms",
		},
		{
			name: "executor without fetch", client: old,
			req:     tool.FetchRequest{URL: srv.URL + "/page", AllowPrivate: true},
			wantErr: tool.ErrFetchUnsupported, errMsg: "too old for web_fetch",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.client.Fetch(t.Context(), tc.req)
			if tc.want != nil {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if *got != *tc.want {
					t.Errorf("got %+v\nwant %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Fetch succeeded: %+v", got)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.errMsg) {
				t.Errorf("err = %q, want it to mention %q", err, tc.errMsg)
			}
		})
	}
	// The refusal is the executor's own (its address check), not a transport error.
	_, err = c.Fetch(t.Context(), tool.FetchRequest{URL: srv.URL})
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeFailed || !strings.Contains(re.Message, webfetch.ErrRefusedAddress.Error()) {
		t.Errorf("err = %#v, want a failed remote error naming the refusal", err)
	}
}
