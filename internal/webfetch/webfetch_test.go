package webfetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// local returns the server's URL with the host name "localhost", which
// tests allow by name (the address is loopback).
func local(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return "http://localhost:" + u.Port() + path
}

func TestFetch(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != UserAgent {
			http.Error(w, "bad user agent", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Docs</title><style>body{color:red}</style>
<script>alert("x")</script></head><body><h2>Install</h2><p>Run <code>make</code>, then
<a href="/next">read on</a>.</p><ul><li>one</li><li>two</li></ul><noscript>enable js</noscript></body></html>`)
	})
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "plain  <b>text</b>\n")
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"a":1}`)
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
		w.Write([]byte("caf\xe9"))
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n"))
	})
	mux.HandleFunc("/sniffed", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // no header: the body is sniffed
		w.Write([]byte("\x00\x01\x02binary"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	mux.HandleFunc("/hop/{n}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		if n == 0 {
			fmt.Fprint(w, "arrived")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("/to", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	port := strings.TrimPrefix(local(t, srv, ""), "http://localhost:")
	byName := []string{"localhost"}

	tests := []struct {
		name       string
		req        tool.FetchRequest
		wantErr    error
		wantErrMsg string
		check      func(t *testing.T, r *tool.FetchResult)
	}{
		{
			name: "html becomes markdown without scripts and styles",
			req:  tool.FetchRequest{URL: local(t, srv, "/page"), AllowHosts: byName},
			check: func(t *testing.T, r *tool.FetchResult) {
				want := "# Docs\n\n## Install\n\nRun `make`, then [read on](" + local(t, srv, "/next") + ").\n\n- one\n- two\n"
				if r.Text != want {
					t.Errorf("text = %q, want %q", r.Text, want)
				}
				if r.Status != 200 || !strings.HasPrefix(r.ContentType, "text/html") || r.Truncated {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name: "plain text passes through",
			req:  tool.FetchRequest{URL: local(t, srv, "/text"), AllowHosts: byName},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Text != "plain  <b>text</b>\n" || r.Bytes != int64(len(r.Text)) {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name: "json passes through",
			req:  tool.FetchRequest{URL: local(t, srv, "/json"), AllowHosts: byName},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Text != `{"a":1}` {
					t.Errorf("text = %q", r.Text)
				}
			},
		},
		{
			name: "declared charset is decoded",
			req:  tool.FetchRequest{URL: local(t, srv, "/latin1"), AllowHosts: byName},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Text != "café" {
					t.Errorf("text = %q", r.Text)
				}
			},
		},
		{
			name: "an error status is a result",
			req:  tool.FetchRequest{URL: local(t, srv, "/missing"), AllowHosts: byName},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Status != 404 || !strings.Contains(r.Text, "no such page") {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name: "redirects are followed",
			req:  tool.FetchRequest{URL: local(t, srv, "/hop/3"), AllowHosts: byName},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Text != "arrived" || r.URL != local(t, srv, "/hop/0") {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{name: "too many redirects", req: tool.FetchRequest{URL: local(t, srv, "/hop/9"), AllowHosts: byName}, wantErr: ErrTooManyRedirects},
		{name: "binary type refused", req: tool.FetchRequest{URL: local(t, srv, "/png"), AllowHosts: byName}, wantErr: ErrUnsupportedType, wantErrMsg: "image/png"},
		{name: "sniffed binary refused", req: tool.FetchRequest{URL: local(t, srv, "/sniffed"), AllowHosts: byName}, wantErr: ErrUnsupportedType},
		{name: "loopback refused by default", req: tool.FetchRequest{URL: srv.URL + "/text"}, wantErr: ErrRefusedAddress, wantErrMsg: "127.0.0.1 is a loopback address"},
		{name: "loopback name refused by default", req: tool.FetchRequest{URL: local(t, srv, "/text")}, wantErr: ErrRefusedAddress, wantErrMsg: "localhost resolves to"},
		{
			name: "loopback allowed with allowPrivate",
			req:  tool.FetchRequest{URL: srv.URL + "/text", AllowPrivate: true},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Status != 200 {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name: "loopback allowed by CIDR",
			req:  tool.FetchRequest{URL: srv.URL + "/text", AllowHosts: []string{"127.0.0.0/8:" + port}},
			check: func(t *testing.T, r *tool.FetchResult) {
				if r.Status != 200 {
					t.Errorf("result = %+v", r)
				}
			},
		},
		{
			name:    "redirect to loopback address refused",
			req:     tool.FetchRequest{URL: local(t, srv, "/to?u="+url.QueryEscape(srv.URL+"/text")), AllowHosts: byName},
			wantErr: ErrRefusedAddress, wantErrMsg: "127.0.0.1 is a loopback address",
		},
		{
			name:    "redirect to metadata address refused",
			req:     tool.FetchRequest{URL: local(t, srv, "/to?u="+url.QueryEscape("http://169.254.169.254/latest/meta-data/")), AllowHosts: byName},
			wantErr: ErrRefusedAddress, wantErrMsg: "169.254.169.254 is a link-local address",
		},
		{
			name:    "redirect to another scheme refused",
			req:     tool.FetchRequest{URL: local(t, srv, "/to?u="+url.QueryEscape("file:///etc/passwd")), AllowHosts: byName},
			wantErr: ErrBadURL,
		},
		{name: "file url refused", req: tool.FetchRequest{URL: "file:///etc/passwd"}, wantErr: ErrBadURL},
		{name: "relative url refused", req: tool.FetchRequest{URL: "/etc/passwd"}, wantErr: ErrBadURL},
		{name: "credentials in url refused", req: tool.FetchRequest{URL: "http://user:secret@localhost/"}, wantErr: ErrBadURL, wantErrMsg: "xxxxx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Fetch(t.Context(), tc.req)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErrMsg) {
					t.Errorf("err = %q, want it to mention %q", err, tc.wantErrMsg)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("err = %q shows the URL's password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			tc.check(t, r)
		})
	}
}

// A body far above maxBytes is cut at maxBytes and the rest is never read:
// the server cannot write all of it. A declared binary body is not read at
// all.
func TestFetchTruncatesLargeBody(t *testing.T) {
	const total, chunk, maxBytes = 50 << 20, 64 << 10, 1 << 20
	tests := []struct {
		contentType string
		wantErr     error
	}{
		{"text/plain", nil},
		{"application/octet-stream", ErrUnsupportedType},
	}
	for _, tc := range tests {
		t.Run(tc.contentType, func(t *testing.T) {
			written := make(chan int, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.Header().Set("Content-Length", fmt.Sprint(total))
				buf := []byte(strings.Repeat("a", chunk))
				n := 0
				for n < total {
					m, err := w.Write(buf)
					n += m
					if err != nil {
						break
					}
				}
				written <- n
			}))
			t.Cleanup(srv.Close)
			r, err := Fetch(t.Context(), tool.FetchRequest{URL: srv.URL, AllowPrivate: true, MaxBytes: maxBytes})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if !r.Truncated || r.Bytes != maxBytes || len(r.Text) != maxBytes {
					t.Errorf("truncated=%v bytes=%d len(text)=%d, want true, %d, %d", r.Truncated, r.Bytes, len(r.Text), maxBytes, maxBytes)
				}
			}
			if n := <-written; n >= total {
				t.Errorf("the server wrote all %d bytes: the client read past its limit", n)
			}
		})
	}
}

func TestFetchTimesOut(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"no headers", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"stalled body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "first bytes")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			_, err := Fetch(t.Context(), tool.FetchRequest{URL: srv.URL, AllowPrivate: true, Timeout: 100 * time.Millisecond})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want a deadline", err)
			}
			if !strings.Contains(err.Error(), "longer than 100ms") {
				t.Errorf("err = %q, want it to name the timeout", err)
			}
		})
	}
}
