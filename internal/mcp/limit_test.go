package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

func TestLimitedBody(t *testing.T) {
	const limit = 10
	for _, tc := range []struct {
		name    string
		body    string
		wantErr bool
	}{
		{"empty", "", false},
		{"under", "0123456", false},
		{"exactly the limit", "0123456789", false},
		{"one byte over", "0123456789a", true},
		{"far over", strings.Repeat("x", 1000), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tooLarge := &responseTooLargeError{server: "s", limit: limit}
			// One byte a read, then whole reads: the bound holds however
			// the SDK reads.
			for _, r := range []io.Reader{iotest.OneByteReader(strings.NewReader(tc.body)), strings.NewReader(tc.body)} {
				b := &limitedBody{rc: io.NopCloser(r), left: limit, err: tooLarge}
				got, err := io.ReadAll(b)
				if tc.wantErr {
					if !errors.Is(err, tooLarge) || string(got) != tc.body[:limit] {
						t.Fatalf("read %q, %v; want the first %d bytes and %v", got, err, limit, tooLarge)
					}
					if n, err := b.Read(make([]byte, 8)); n != 0 || !errors.Is(err, tooLarge) {
						t.Fatalf("read after the limit = %d, %v; want 0, %v", n, err, tooLarge)
					}
					continue
				}
				if err != nil || string(got) != tc.body {
					t.Fatalf("read %q, %v; want %q", got, err, tc.body)
				}
			}
		})
	}
}

// flooding is a hostile server's answer: status 200, Content-Type
// application/json and a body that opens a JSON-RPC response and never
// closes it. It writes at most total bytes, then holds the response open
// until the client hangs up. The bytes it wrote are sent on the returned
// channel once the handler ends.
func flooding(total int) (answer func(http.ResponseWriter, *http.Request), written <-chan int) {
	ch := make(chan int, 1)
	answer = func(w http.ResponseWriter, r *http.Request) {
		n := 0
		defer func() { ch <- n }()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		chunk := bytes.Repeat([]byte("a"), 32<<10)
		m, err := io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"padding":"`)
		n += m
		for err == nil && n < total {
			m, err = w.Write(chunk)
			n += m
			if err == nil {
				err = rc.Flush()
			}
		}
		if err == nil {
			<-r.Context().Done() // everything sent: hold on until the client hangs up
		}
	}
	return answer, ch
}

// A remote server answering initialize, or a tools/call, with an endless
// JSON body (application/json: the SDK reads it whole) makes the manager
// read no more than the limit: connecting, or the call, fails at once
// with "response larger than <limit> bytes", and the server's writes fail
// long before its body is sent. On the old code the client read the whole
// body (with no end, until the manager ran out of memory; here 64 MiB,
// then no answer within the server's timeout).
func TestEndlessJSONResponseIsCapped(t *testing.T) {
	const (
		limit = 64 << 10
		total = 64 << 20 // far more than limit plus what the sockets buffer
	)
	want := fmt.Sprintf("mcp server flood: response larger than %d bytes", limit)
	for _, tc := range []struct {
		name   string
		method string // the request answered with the flood
		// run connects to the server at url and makes the flooded request;
		// it returns that request's error.
		run func(t *testing.T, url string) error
	}{
		{
			name:   "initialize",
			method: "initialize",
			run: func(t *testing.T, url string) error {
				c, err := connect(t.Context(), Server{Name: "flood", URL: url, Timeout: 10 * time.Second}, limit)
				if err == nil {
					_ = c.Close()
				}
				return err
			},
		},
		{
			name:   "tools/call",
			method: "tools/call",
			run: func(t *testing.T, url string) error {
				c, err := connect(t.Context(), Server{Name: "flood", URL: url, Timeout: 10 * time.Second, AllowedTools: []string{mcptest.Echo}}, limit)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				tools := c.Tools()
				if len(tools) != 1 {
					t.Fatalf("tools = %d, want 1 (echo)", len(tools))
				}
				_, err = tools[0].Executor(t.Context(), &tool.Invocation{Arguments: json.RawMessage(`{"text":"hi"}`)})
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mcptest.NewSDKServer(0, nil, nil)
			handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
			flood, written := flooding(total)
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					// No HTTP+SSE fallback, no standalone stream.
					http.Error(w, "no", http.StatusMethodNotAllowed)
					return
				}
				body, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				var msg struct{ Method string }
				if json.Unmarshal(body, &msg) == nil && msg.Method == tc.method {
					flood(w, r)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				handler.ServeHTTP(w, r)
			}))
			t.Cleanup(ts.Close)

			err := tc.run(t, ts.URL)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error = %v, want one saying %q", err, want)
			}
			select {
			case n := <-written:
				if n >= total {
					t.Errorf("the server wrote its whole %d-byte body: the client read past the limit", n)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the server is still writing after 30s: the client did not hang up")
			}
		})
	}
}
