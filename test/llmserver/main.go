// Command llmserver serves scripted LLM conversations over the real provider
// wire protocols (Anthropic Messages, OpenAI Responses, Chat Completions,
// Gemini) for in-cluster end-to-end tests, using the fake servers of
// internal/llm/llmtest. It is a test tool, never a production component.
//
//	llmserver --listen :8080 --script demo.yaml                 # all protocols: /anthropic, /openai-responses, /chat-completions, /gemini
//	llmserver --listen :8080 --script demo.yaml --protocol gemini  # one protocol at the root
//	llmserver --listen :8080 --script scripts/                  # one script per file: /<file name>/<protocol>
//
// Point an adapter at http://host:8080/anthropic (Anthropic, Gemini) or
// http://host:8080/openai-responses/v1 (the OpenAI protocols include /v1).
//
// GET /requests lists every model request answered so far, in order, as JSON
// (method, path, headers and the HTTP status sent, 0 for a dropped
// connection), so a test can count retries; each request is also logged as
// one line (method, path, status; never headers or bodies).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm/llmtest"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "llmserver:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("llmserver", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "address to listen on")
	scriptPath := fs.String("script", "", "script file (YAML or JSON), or a directory of them")
	protocol := fs.String("protocol", "all", "protocol to serve: all, anthropic, openai-responses, chat-completions or gemini")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mux, routes, err := buildMux(*scriptPath, *protocol)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("llmserver listening on %s", *listen)
	for _, r := range routes {
		log.Printf("  %s", r)
	}
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// buildMux loads the scripts and routes each protocol handler.
func buildMux(scriptPath, protocol string) (*http.ServeMux, []string, error) {
	if scriptPath == "" {
		return nil, nil, errors.New("--script is required")
	}
	protocols, err := selectProtocols(protocol)
	if err != nil {
		return nil, nil, err
	}
	scripts, err := loadScripts(scriptPath)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	reqs := &requestLog{}
	mux.Handle("GET /requests", reqs)
	var routes []string
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, p := range protocols {
			prefix := "/"
			if name != "" {
				prefix += name + "/"
			}
			if protocol == "all" {
				prefix += string(p) + "/"
			}
			mux.Handle(prefix, reqs.record(llmtest.NewHandler(p, scripts[name])))
			routes = append(routes, fmt.Sprintf("%-17s %s (base URL %s)", p, prefix, llmtest.BaseURL(p, "http://HOST"+strings.TrimSuffix(prefix, "/"))))
		}
	}
	return mux, routes, nil
}

func selectProtocols(p string) ([]llmtest.Protocol, error) {
	if p == "all" {
		return llmtest.Protocols, nil
	}
	for _, known := range llmtest.Protocols {
		if string(known) == p {
			return []llmtest.Protocol{known}, nil
		}
	}
	valid := []string{"all"}
	for _, known := range llmtest.Protocols {
		valid = append(valid, string(known))
	}
	return nil, fmt.Errorf("unknown protocol %q: valid are %s", p, strings.Join(valid, ", "))
}

// loadScripts reads one script (key "") or every script in a directory
// (keyed by file name without extension).
func loadScripts(path string) (map[string]*scripted.Script, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read scripts: %w", err)
	}
	if !st.IsDir() {
		s, err := loadScript(path)
		if err != nil {
			return nil, err
		}
		return map[string]*scripted.Script{"": s}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("read scripts: %w", err)
	}
	scripts := map[string]*scripted.Script{}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		s, err := loadScript(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		scripts[strings.TrimSuffix(e.Name(), ext)] = s
	}
	if len(scripts) == 0 {
		return nil, fmt.Errorf("no scripts (*.yaml, *.yml, *.json) in %s", path)
	}
	return scripts, nil
}

func loadScript(path string) (*scripted.Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read script: %w", err)
	}
	s, err := scripted.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Request is one model request as GET /requests reports it.
type Request struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	// Status is the HTTP status sent, 0 when the connection was dropped
	// without a response (a scripted network error).
	Status int `json:"status"`
}

// requestLog records the requests of the script handlers and serves them.
type requestLog struct {
	mu   sync.Mutex
	reqs []Request
}

// record wraps h so that each request it answers is logged and recorded.
// The request is recorded when it arrives and its status the moment the
// handler decides it, before any byte of the answer reaches the client: a
// client that reads GET /requests right after its call (or after its
// connection was dropped) sees that call.
func (l *requestLog) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		i := len(l.reqs)
		l.reqs = append(l.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()})
		l.mu.Unlock()
		sw := &statusWriter{ResponseWriter: w, decided: func(code int) {
			l.mu.Lock()
			l.reqs[i].Status = code
			l.mu.Unlock()
		}}
		defer func() { log.Printf("%s %s -> %d", r.Method, r.URL.Path, sw.status) }()
		h.ServeHTTP(sw, r)
	})
}

// ServeHTTP answers GET /requests.
func (l *requestLog) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	l.mu.Lock()
	reqs := append([]Request{}, l.reqs...)
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(reqs); err != nil {
		log.Printf("write /requests: %v", err)
	}
}

// statusWriter remembers the status written through it. It passes Flush and
// Hijack on, which the llmtest handlers use for streams and dropped
// connections.
type statusWriter struct {
	http.ResponseWriter
	status  int
	decided func(code int)
}

func (w *statusWriter) decide(code int) {
	if w.status == 0 {
		w.status = code
		w.decided(code)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.decide(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.decide(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack: the response writer does not support it")
	}
	return hj.Hijack()
}
