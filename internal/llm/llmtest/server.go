package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
)

// Protocol is a provider wire protocol.
type Protocol string

// Protocols served.
const (
	Anthropic       Protocol = "anthropic"        // POST …/v1/messages
	OpenAIResponses Protocol = "openai-responses" // POST …/v1/responses
	ChatCompletions Protocol = "chat-completions" // POST …/v1/chat/completions
	Gemini          Protocol = "gemini"           // POST …/v1beta/models/{m}:generateContent, :streamGenerateContent?alt=sse
)

// Protocols lists every Protocol.
var Protocols = []Protocol{Anthropic, OpenAIResponses, ChatCompletions, Gemini}

// Request is one request a server received.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	// Body is the decoded JSON body (nil when it is not a JSON object).
	Body    map[string]any
	RawBody []byte
}

// Canned is a fixed response, for replaying recorded provider traffic.
type Canned struct {
	Status      int
	ContentType string
	Body        string
}

// Handler serves one protocol. Create it with NewHandler or NewReplayHandler.
type Handler struct {
	protocol Protocol
	client   *scripted.Client

	// OmitCallIDs makes the Gemini and Chat Completions servers leave tool
	// call ids empty, as some Gemini models and some OpenAI-compatible
	// servers do, so the adapter must generate them.
	OmitCallIDs bool

	// respond, when set, answers instead of client (NewResponderHandler).
	respond   Responder
	respondMu sync.Mutex

	mu       sync.Mutex
	requests []Request
	canned   []Canned
	replay   bool
}

// NewHandler returns a handler answering protocol p from script s.
func NewHandler(p Protocol, s *scripted.Script) *Handler {
	return &Handler{protocol: p, client: scripted.New(s, "llmtest")}
}

// Responder computes the answer to one request in place of a script: rec
// is the request as received (raw body included), req its decoded form.
// It may keep state; calls are serialised per handler.
type Responder func(rec Request, req *llm.Request) (scripted.Reply, error)

// NewResponderHandler returns a handler answering protocol p with r, for
// long or generated conversations a fixed script cannot describe (e.g.
// answers that depend on which kind of request arrives).
func NewResponderHandler(p Protocol, r Responder) *Handler {
	return &Handler{protocol: p, respond: r}
}

// NewReplayHandler returns a handler answering the n-th request with
// responses[n] verbatim, whatever it asks (an exhausted list answers 500).
func NewReplayHandler(p Protocol, responses ...Canned) *Handler {
	return &Handler{protocol: p, canned: responses, replay: true}
}

// Requests returns a copy of every request received so far, in order.
func (h *Handler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// Protocol is the protocol h serves.
func (h *Handler) Protocol() Protocol { return h.protocol }

// Server is a running loopback server for one protocol.
type Server struct {
	*Handler
	// URL is the server root, e.g. http://127.0.0.1:1234.
	URL string
	srv *httptest.Server
}

// BaseURL is the base URL to give the adapter for this protocol: the root
// for Anthropic and Gemini (their SDKs add v1/ or v1beta/), root + "/v1" for
// the OpenAI protocols.
func (s *Server) BaseURL() string { return BaseURL(s.protocol, s.URL) }

// BaseURL is the adapter base URL for protocol p served at root.
func BaseURL(p Protocol, root string) string {
	if p == OpenAIResponses || p == ChatCompletions {
		return root + "/v1"
	}
	return root
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Start starts h on a loopback port and stops it when t ends.
func Start(t testing.TB, h *Handler) *Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Server{Handler: h, URL: srv.URL, srv: srv}
}

// StartScript starts a server for protocol p replaying script s.
func StartScript(t testing.TB, p Protocol, s *scripted.Script) *Server {
	t.Helper()
	return Start(t, NewHandler(p, s))
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	rec := Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), RawBody: raw}
	_ = json.Unmarshal(raw, &rec.Body)
	h.mu.Lock()
	h.requests = append(h.requests, rec)
	var canned *Canned
	if h.replay {
		canned = &Canned{Status: http.StatusInternalServerError, ContentType: "text/plain", Body: "llmtest: no more canned responses"}
		if len(h.canned) > 0 {
			canned = &h.canned[0]
			h.canned = h.canned[1:]
		}
	}
	h.mu.Unlock()
	if canned != nil {
		w.Header().Set("Content-Type", canned.ContentType)
		w.WriteHeader(canned.Status)
		io.WriteString(w, canned.Body)
		return
	}
	if r.Method != http.MethodPost || !h.routeOK(r.URL.Path) {
		http.Error(w, fmt.Sprintf("llmtest %s: no route for %s %s", h.protocol, r.Method, r.URL.Path), http.StatusNotFound)
		return
	}
	if rec.Body == nil {
		h.writeError(w, &llm.Error{Kind: llm.KindInvalidRequest, Message: "body is not a JSON object"}, "")
		return
	}
	codec := codecs[h.protocol]
	req, stream, err := codec.decode(r, rec.Body)
	if err != nil {
		h.writeError(w, &llm.Error{Kind: llm.KindInvalidRequest, Message: err.Error()}, "")
		return
	}
	var reply scripted.Reply
	if h.respond != nil {
		h.respondMu.Lock()
		reply, err = h.respond(rec, req)
		h.respondMu.Unlock()
	} else {
		reply, err = h.client.Resolve(req)
	}
	if err != nil {
		h.writeError(w, &llm.Error{Kind: llm.KindInvalidRequest, Message: err.Error()}, "")
		return
	}
	if (h.protocol == Gemini || h.protocol == ChatCompletions) && h.OmitCallIDs {
		for i := range reply.Response.Message.Content {
			if tc := reply.Response.Message.Content[i].ToolCall; tc != nil {
				c := *tc
				c.ID = ""
				reply.Response.Message.Content[i].ToolCall = &c
			}
		}
	}
	if reply.Err != nil && (!stream || !reply.MidStream) {
		h.writeError(w, reply.Err, reply.Code)
		return
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(codec.response(reply.Response, rec.Body))
		return
	}
	sw := newSSE(w, h.protocol)
	codec.stream(sw, reply, r, rec.Body)
}

func (h *Handler) routeOK(path string) bool {
	switch h.protocol {
	case Anthropic:
		return strings.HasSuffix(path, "/v1/messages")
	case OpenAIResponses:
		return strings.HasSuffix(path, "/v1/responses")
	case ChatCompletions:
		return strings.HasSuffix(path, "/chat/completions")
	case Gemini:
		return strings.Contains(path, "/v1beta/models/") &&
			(strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent"))
	}
	return false
}

// codec is one protocol's request decoding and response encoding.
type codec struct {
	// decode turns the wire request into the llm.Request the script sees,
	// rejecting histories the real API would reject; stream says whether
	// a streamed answer was asked for.
	decode   func(r *http.Request, body map[string]any) (*llm.Request, bool, error)
	response func(resp *llm.Response, body map[string]any) any
	stream   func(w *sse, reply scripted.Reply, r *http.Request, body map[string]any)
	errBody  func(e *llm.Error, status int, code string) any
}

var codecs = map[Protocol]codec{}

func statusFor(e *llm.Error) int {
	if e.StatusCode != 0 {
		return e.StatusCode
	}
	switch e.Kind {
	case llm.KindAuthentication:
		return http.StatusUnauthorized
	case llm.KindPermission:
		return http.StatusForbidden
	case llm.KindRateLimit:
		return http.StatusTooManyRequests
	case llm.KindContextLength, llm.KindInvalidRequest:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func messageFor(e *llm.Error) string {
	if e.Message != "" {
		return e.Message
	}
	switch e.Kind {
	case llm.KindContextLength:
		return "prompt is too long: 250000 tokens > 200000 maximum (context length exceeded)"
	case llm.KindAuthentication:
		return "invalid x-api-key"
	case llm.KindRateLimit:
		return "rate limit exceeded"
	}
	return string(e.Kind) + " error"
}

func (h *Handler) writeError(w http.ResponseWriter, e *llm.Error, code string) {
	if e.Kind == llm.KindNetwork {
		hijackClose(w)
		return
	}
	status := statusFor(e)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(e.RetryAfter.Milliseconds(), 10))
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(codecs[h.protocol].errBody(e, status, code))
}

// hijackClose drops the connection without a response.
func hijackClose(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// sse writes server-sent events and flushes each.
type sse struct {
	w        http.ResponseWriter
	protocol Protocol
	started  bool
}

func newSSE(w http.ResponseWriter, p Protocol) *sse {
	return &sse{w: w, protocol: p}
}

func (s *sse) start() {
	if s.started {
		return
	}
	s.started = true
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.Header().Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

// event writes one event: "event: <name>" (when name is set), one data line,
// and the separator the provider uses.
func (s *sse) event(name string, data any) {
	s.start()
	b, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("llmtest: marshal event: %v", err))
	}
	s.raw(name, string(b))
}

func (s *sse) raw(name, data string) {
	s.start()
	sep := "\n\n"
	if s.protocol == Gemini {
		sep = "\r\n\r\n"
	}
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s%s", data, sep)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// stall blocks until the client goes away.
func (s *sse) stall(r *http.Request) {
	<-r.Context().Done()
}

// textChunks splits text into a few deltas.
func textChunks(s string) []string {
	if len(s) <= 8 {
		return []string{s}
	}
	mid := len(s) / 2
	return []string{s[:mid], s[mid:]}
}
