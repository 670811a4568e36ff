package builtin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// noFetch is an environment without a tool.Fetcher.
type noFetch struct{ tool.ExecutionEnvironment }

func webServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			<-r.Context().Done()
		case "/missing":
			http.Error(w, "gone fishing", http.StatusNotFound)
		case "/digits":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "0123456789")
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>Guide</title><script>secret()</script><p>Use <a href="/x">this</a>.</p>`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestWebFetch(t *testing.T) {
	srv := webServer(t)
	env, _ := newEnv(t)
	open := WebFetchOptions{AllowPrivate: true}
	tests := []struct {
		name     string
		opts     WebFetchOptions
		env      tool.ExecutionEnvironment
		args     any
		isError  bool
		contains []string
		absent   []string
	}{
		{name: "page as markdown", opts: open, args: map[string]any{"url": srv.URL + "/page"},
			contains: []string{"URL: " + srv.URL + "/page\n", "Status: 200 OK", "Content-Type: text/html", "# Guide", "Use [this](" + srv.URL + "/x)."},
			absent:   []string{"secret()", "Characters"}},
		{name: "parts", opts: open, args: map[string]any{"url": srv.URL + "/digits", "max_chars": 4, "start_index": 2},
			contains: []string{"[Characters 2-6 of 10. Call web_fetch again with start_index=6 to read on.]\n\n2345"}, absent: []string{"23456"}},
		{name: "last part", opts: open, args: map[string]any{"url": srv.URL + "/digits", "start_index": "8"},
			contains: []string{"[Characters 8-10 of 10.]\n\n89"}, absent: []string{"read on"}},
		{name: "start past the end", opts: open, args: map[string]any{"url": srv.URL + "/digits", "start_index": 10}, isError: true,
			contains: []string{"past the end"}},
		{name: "error status", opts: open, args: map[string]any{"url": srv.URL + "/missing"}, isError: true,
			contains: []string{"Status: 404 Not Found", "gone fishing"}},
		{name: "private address refused", opts: WebFetchOptions{}, args: map[string]any{"url": srv.URL + "/page"}, isError: true,
			contains: []string{"cannot fetch", "loopback address"}},
		{name: "allowed by host list", opts: WebFetchOptions{AllowHosts: []string{"127.0.0.1"}}, args: map[string]any{"url": srv.URL + "/digits"},
			contains: []string{"0123456789"}},
		{name: "timeout", opts: WebFetchOptions{AllowPrivate: true, Timeout: 100 * time.Millisecond}, args: map[string]any{"url": srv.URL + "/slow"}, isError: true,
			contains: []string{"timed out (limit 100ms)"}},
		{name: "environment without fetch", opts: open, env: noFetch{env}, args: map[string]any{"url": srv.URL}, isError: true,
			contains: []string{"web_fetch is not available"}},
		{name: "missing url", opts: open, args: map[string]any{}, isError: true, contains: []string{`"url" parameter is required`}},
		{name: "not http", opts: open, args: map[string]any{"url": "file:///etc/passwd"}, isError: true, contains: []string{"not an http or https URL"}},
		{name: "bad max_chars", opts: open, args: `{"url":"http://x","max_chars":"many"}`, isError: true, contains: []string{"Invalid arguments for web_fetch"}},
		{name: "zero max_chars", opts: open, args: map[string]any{"url": srv.URL, "max_chars": 0}, isError: true, contains: []string{"max_chars must be at least 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env
			if e == nil {
				e = env
			}
			res, _ := call{env: e}.run(t, WebFetch(tc.opts), tc.args)
			expect(t, res, tc.isError, tc.contains...)
			for _, s := range tc.absent {
				if strings.Contains(res.Output, s) {
					t.Errorf("output contains %q:\n%s", s, res.Output)
				}
			}
		})
	}
}

// The call cap counts the fetches of one tool instance; later calls get an
// error result without fetching.
func TestWebFetchCallCap(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	env, _ := newEnv(t)
	wf := WebFetch(WebFetchOptions{AllowPrivate: true, MaxCalls: 2})
	c := call{env: env}
	// Bad arguments do not use up the budget.
	res, _ := c.run(t, wf, map[string]any{"url": "ftp://example.com"})
	expect(t, res, true, "not an http or https URL")
	for range 2 {
		res, _ := c.run(t, wf, map[string]any{"url": srv.URL})
		expect(t, res, false, "ok")
	}
	res, _ = c.run(t, wf, map[string]any{"url": srv.URL})
	expect(t, res, true, "call limit reached", "at most 2 web_fetch calls")
	if n := hits.Load(); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
	// A fresh instance (another session) has its own budget.
	res, _ = c.run(t, WebFetch(WebFetchOptions{AllowPrivate: true, MaxCalls: 2}), map[string]any{"url": srv.URL})
	expect(t, res, false, "ok")
}

func TestWebFetchSchema(t *testing.T) {
	reg := tool.NewRegistry()
	if err := reg.Register(WebFetch(WebFetchOptions{})); err != nil {
		t.Fatalf("Register: %v", err)
	}
	tests := []struct {
		args string
		ok   bool
	}{
		{`{"url":"https://example.com"}`, true},
		{`{"url":"https://example.com","max_chars":10,"start_index":0}`, true},
		{`{}`, false},
		{`{"url":5}`, false},
		{`{"url":"https://example.com","max_chars":0}`, false},
		{`{"url":"https://example.com","start_index":-1}`, false},
	}
	for _, tc := range tests {
		err := reg.Validate("web_fetch", json.RawMessage(tc.args))
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%s) = %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
	d := WebFetch(WebFetchOptions{MaxCalls: 7}).Definition
	if !strings.Contains(d.Description, "at most 7 web_fetch calls") {
		t.Errorf("description does not state the cap: %s", d.Description)
	}
}
