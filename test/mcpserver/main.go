// Command mcpserver is a TEST-ONLY MCP server built with the official Go SDK:
// the tools of internal/mcp/mcptest (echo, fail, slow, get.weather, and
// crash, which makes the process exit with code 3 mid-call) over stdio or
// streamable HTTP; with -tool-changes also add_tool, remove_tool and
// tools_listed (mcptest.AddToolChanges), which change its tool list at
// runtime so clients get notifications/tools/list_changed. The e2e suite runs it as an in-cluster Service and, in
// stdio mode, inside a workspace pod as a stdio MCP server. In HTTP mode it also serves
// /page.html and /big.txt (50 MB) for the web_fetch e2e.
//
// Usage:
//
//	mcpserver -stdio            # JSON-RPC on stdin/stdout
//	mcpserver -addr :8080       # streamable HTTP at /mcp, /healthz for probes, /calls
//	mcpserver -stdio -tool-changes
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

// pageHTML is the page /page.html serves.
const pageHTML = `<!doctype html><html><head><title>Operator docs</title><script>stealCookies()</script></head>
<body><h1>Operator docs</h1><p>The answer is <b>42</b>.</p></body></html>`

// bigBytes is the size of /big.txt: 50 MB.
const bigBytes = 50 << 20

func main() {
	stdio := flag.Bool("stdio", false, "serve on stdin/stdout instead of HTTP")
	addr := flag.String("addr", ":8080", "HTTP listen address")
	changes := flag.Bool("tool-changes", false, "also offer add_tool, remove_tool and tools_listed")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	crash := func() {
		fmt.Fprintln(os.Stderr, "mcpserver: crashing as the crash tool asks")
		os.Exit(3)
	}
	srv := mcptest.NewSDKServer(0, make(chan struct{}), crash)
	if *changes {
		mcptest.AddToolChanges(srv)
	}
	calls := &callCounter{n: map[string]int{}}
	srv.AddReceivingMiddleware(calls.middleware)
	if *stdio {
		if err := srv.Run(ctx, &sdk.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "mcpserver:", err)
			os.Exit(1)
		}
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// How often each tool was called, as JSON: the e2e suite checks with it that a call cut by a
	// manager kill is never made again.
	mux.HandleFunc("/calls", calls.serve)
	// Pages for the web_fetch e2e: a small HTML page, and 50 MB of text generated as it is
	// sent (never held in memory).
	mux.HandleFunc("/page.html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, pageHTML)
	})
	mux.HandleFunc("/big.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(bigBytes))
		line := []byte(strings.Repeat("a", 1023) + "\n")
		for sent := 0; sent < bigBytes && r.Context().Err() == nil; sent += len(line) {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	})
	hs := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Printf("mcpserver: serving streamable HTTP on %s/mcp", *addr)
	if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// callCounter counts the tools/call requests the server received, by tool name.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && method == "tools/call" {
			c.mu.Lock()
			c.n[p.Name]++
			c.mu.Unlock()
		}
		return next(ctx, method, req)
	}
}

func (c *callCounter) serve(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(c.n)
}
