package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/uistream"
)

// Names of the console's credentials on the wire. The cookie names carry
// the port: cookies are per host, not per port, and two consoles may run.
const (
	consoleCookie = "agent_console_"      // + port: the token, HttpOnly
	csrfCookie    = "agent_console_csrf_" // + port: the CSRF value, readable by the page
	tokenHeader   = "X-Agent-Console-Token"
	csrfHeader    = "X-Agent-Console-CSRF" // the same string as CSRF_HEADER in web/console/src/api.ts
	csrfMeta      = "csrf-token"           // <meta name=...> holding the CSRF value in the served index.html
	tokenParam    = "token"
)

type uiOptions struct {
	port int
	open bool
}

func newUICmd(g *globals) *cobra.Command {
	o := &uiOptions{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the console on 127.0.0.1: watch, steer and review sessions in a browser",
		Long: `Serve the console on 127.0.0.1 with your kubeconfig's credentials: Kubernetes RBAC decides
what you see and change. Every request needs the per-run token of the printed URL; the
browser keeps it in a cookie. Events are read as by "kubectl agent logs". A browser is opened
only when stdin is a terminal and CI is not set.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			con, err := newConsole(c, ns, g, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return con.serve(cmd.Context(), o, cmd.OutOrStdout(), cmd.InOrStdin())
		},
	}
	cmd.Flags().IntVar(&o.port, "port", 0, "port on 127.0.0.1 to listen on (0: a free one)")
	cmd.Flags().BoolVar(&o.open, "open", true, "open the console in a browser (never when CI is set or stdin is not a terminal)")
	return cmd
}

// uiDist is the console frontend `make ui` builds (web/console). A fresh
// clone holds only its placeholder .gitkeep: the plugin then serves
// placeholderHTML.
//
//go:embed all:ui/dist
var uiDist embed.FS

// console serves the console's frontend and API. Every request must carry
// the token (see guard); no response ever holds a Kubernetes or NATS
// credential.
type console struct {
	kube      client.Client
	namespace string
	token     string
	csrf      string
	// jetStream connects to the events of a namespace as "kubectl agent
	// logs" does: --nats-url, or the manager's embedded server with a
	// read-only credential for namespace. Call the returned function when
	// done.
	jetStream func(ctx context.Context, namespace string) (jetstream.JetStream, func(), error)
	readOpts  []events.ReadOption
	// ui is the built frontend: index.html and assets/ (uiDist's ui/dist;
	// tests set their own).
	ui        fs.FS
	log       io.Writer
	keepAlive time.Duration
}

func newConsole(c client.Client, namespace string, g *globals, log io.Writer) (*console, error) {
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	csrf, err := randomToken()
	if err != nil {
		return nil, err
	}
	ui, err := fs.Sub(uiDist, "ui/dist")
	if err != nil {
		return nil, fmt.Errorf("open the embedded console: %w", err)
	}
	return &console{kube: c, namespace: namespace, token: token, csrf: csrf, jetStream: g.jetStream,
		readOpts: []events.ReadOption{events.WithStreamConfig(g.stream)}, ui: ui, log: log}, nil
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// serve listens on 127.0.0.1, prints the URL and serves until ctx ends.
func (c *console) serve(ctx context.Context, o *uiOptions, out io.Writer, in io.Reader) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	u := c.url(ln.Addr().String())
	fmt.Fprintf(out, "Console: %s\n", u)
	if o.open && mayOpenBrowser(in) {
		if err := openBrowser(u); err != nil {
			fmt.Fprintf(c.log, "ui: open a browser: %v\n", err)
		}
	}
	srv := &http.Server{Handler: c.handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}

// url is the console's address with the token, which the first request
// trades for a cookie.
func (c *console) url(addr string) string {
	return "http://" + addr + "/?" + tokenParam + "=" + url.QueryEscape(c.token)
}

// mayOpenBrowser: not in CI and only for a person at a terminal.
func mayOpenBrowser(in io.Reader) bool {
	if os.Getenv("CI") != "" {
		return false
	}
	f, ok := in.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func openBrowser(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// handler is the console's routing behind guard and the request log.
func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.index)
	mux.HandleFunc("GET /assets/{path...}", c.asset)
	mux.HandleFunc("GET /api/sessions", c.list)
	mux.HandleFunc("GET /api/sessions/{ns}/{name}", c.get)
	mux.HandleFunc("GET /api/sessions/{ns}/{name}/diff", c.diff)
	mux.HandleFunc("GET /api/sessions/{ns}/{name}/stream", c.stream)
	mux.HandleFunc("POST /api/sessions/{ns}/{name}/{action}", c.act)
	return c.logRequests(c.guard(mux))
}

// guard admits a request only from a loopback host name (no DNS
// rebinding), with the token (query parameter once, then the cookie, or
// the header), and a mutating request only from the console's own origin
// with the CSRF header (unless the token came in a header, which a page of
// another origin cannot set).
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		host, port, err := net.SplitHostPort(r.Host)
		if err != nil || !loopbackName(host) {
			http.Error(w, "the console answers on 127.0.0.1 only", http.StatusMisdirectedRequest)
			return
		}
		byHeader := false
		switch tok, from := c.presented(r, port); {
		case from == "":
			http.Error(w, "the console's token is required: open the URL kubectl agent ui printed", http.StatusUnauthorized)
			return
		case !c.valid(tok, c.token):
			http.Error(w, "wrong console token", http.StatusForbidden)
			return
		case from == "query":
			if r.Method != http.MethodGet {
				http.Error(w, "the token is accepted in the URL of a GET only", http.StatusForbidden)
				return
			}
			c.setCookies(w, port)
			q := r.URL.Query()
			q.Del(tokenParam)
			to := r.URL.Path
			if len(q) > 0 {
				to += "?" + q.Encode()
			}
			http.Redirect(w, r, to, http.StatusSeeOther) // out of the address bar and history
			return
		case from == "header":
			byHeader = true
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
			if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
				http.Error(w, "cross-site request refused", http.StatusForbidden)
				return
			}
			if !byHeader && !c.valid(r.Header.Get(csrfHeader), c.csrf) {
				http.Error(w, "missing or wrong "+csrfHeader+" header", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// presented returns the token a request carries and where: "query",
// "header", "cookie", or "" for none.
func (c *console) presented(r *http.Request, port string) (string, string) {
	if t := r.URL.Query().Get(tokenParam); t != "" {
		return t, "query"
	}
	if t := r.Header.Get(tokenHeader); t != "" {
		return t, "header"
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && t != "" {
		return t, "header"
	}
	if ck, err := r.Cookie(consoleCookie + port); err == nil && ck.Value != "" {
		return ck.Value, "cookie"
	}
	return "", ""
}

func (c *console) valid(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (c *console) setCookies(w http.ResponseWriter, port string) {
	http.SetCookie(w, &http.Cookie{Name: consoleCookie + port, Value: c.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	// The page reads this one and echoes it in csrfHeader; another
	// origin can neither read it nor set the header.
	http.SetCookie(w, &http.Cookie{Name: csrfCookie + port, Value: c.csrf, Path: "/", SameSite: http.SameSiteStrictMode})
}

func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// logRequests logs method, path (never the query, which may hold the
// token) and status of every request.
func (c *console) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		fmt.Fprintf(c.log, "ui: %s %s %d\n", r.Method, r.URL.Path, sw.status)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController flush the SSE stream.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// placeholderHTML is the page of a binary built without `make ui`.
const placeholderHTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>agent-operator console</title></head>
<body><h1>agent-operator console</h1>
<p>The UI assets are not built into this kubectl-agent binary: run <code>make ui</code>, then build kubectl-agent again.</p>
<p>The API is available: <code>GET /api/sessions</code>, <code>GET /api/sessions/{namespace}/{name}</code>,
<code>GET /api/sessions/{namespace}/{name}/stream</code> (an AI SDK UI message stream),
<code>GET /api/sessions/{namespace}/{name}/diff</code>,
<code>POST /api/sessions/{namespace}/{name}/{steer|followup|abort|suspend|resume}</code>.</p>
</body></html>
`

// index serves the built index.html with the CSRF value in
// <meta name="csrf-token"> (the page echoes it in csrfHeader), or
// placeholderHTML when the frontend is not built in.
func (c *console) index(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
	page, err := fs.ReadFile(c.ui, "index.html")
	if err != nil {
		_, _ = io.WriteString(w, placeholderHTML)
		return
	}
	// no-cache: always the current build; no-store: the page holds this
	// run's CSRF value.
	h.Set("Cache-Control", "no-cache, no-store")
	_, _ = w.Write(injectCSRF(page, c.csrf))
}

// injectCSRF puts <meta name="csrf-token" content="csrf"> before the
// page's </head> (at its start when it has none).
func injectCSRF(page []byte, csrf string) []byte {
	meta := `<meta name="` + csrfMeta + `" content="` + html.EscapeString(csrf) + `">`
	i := bytes.Index(bytes.ToLower(page), []byte("</head>"))
	if i < 0 {
		return append([]byte(meta), page...)
	}
	out := make([]byte, 0, len(page)+len(meta))
	out = append(out, page[:i]...)
	out = append(out, meta...)
	return append(out, page[i:]...)
}

// asset serves a file of the built frontend's assets/: Vite names them by
// their content's hash, so they may be cached for long.
func (c *console) asset(w http.ResponseWriter, r *http.Request) {
	name := path.Join("assets", r.PathValue("path"))
	if st, err := fs.Stat(c.ui, name); err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	http.ServeFileFS(w, r, c.ui, name)
}

// sessionItem is one row of GET /api/sessions.
type sessionItem struct {
	Name       string    `json:"name"`
	Namespace  string    `json:"namespace"`
	Phase      string    `json:"phase"`
	Model      string    `json:"model"`
	Parent     string    `json:"parent,omitempty"`
	Turns      int32     `json:"turns"`
	ToolCalls  int32     `json:"toolCalls"`
	Tokens     int64     `json:"tokens"`
	TreeTokens int64     `json:"treeTokens"`
	Cost       string    `json:"cost,omitempty"`
	TreeCost   string    `json:"treeCost,omitempty"`
	Currency   string    `json:"currency,omitempty"`
	Created    time.Time `json:"created"`
	AgeSeconds int64     `json:"ageSeconds"`
}

// list serves the sessions of ?namespace= (default: the kubeconfig's),
// or of every namespace with ?allNamespaces=true, read as the user.
func (c *console) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var opts []client.ListOption
	if q.Get("allNamespaces") != "true" {
		ns := q.Get("namespace")
		if ns == "" {
			ns = c.namespace
		}
		opts = append(opts, client.InNamespace(ns))
	}
	var list v1alpha1.AgentSessionList
	if err := c.kube.List(r.Context(), &list, opts...); err != nil {
		apiError(w, fmt.Errorf("list agentsessions: %w", err))
		return
	}
	now := time.Now()
	items := make([]sessionItem, 0, len(list.Items))
	for _, s := range list.Items {
		it := sessionItem{Name: s.Name, Namespace: s.Namespace, Phase: string(s.Status.Phase), Model: s.Spec.Model.Name,
			Turns: s.Status.Turns, ToolCalls: s.Status.ToolCalls, Tokens: s.Status.Usage.Total, TreeTokens: s.Status.TreeTokens,
			Cost: s.Status.Cost, TreeCost: s.Status.TreeCost, Currency: s.Status.Currency,
			Created: s.CreationTimestamp.UTC(), AgeSeconds: int64(now.Sub(s.CreationTimestamp.Time).Seconds())}
		if s.Spec.ParentRef != nil {
			it.Parent = s.Spec.ParentRef.Name
		}
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b sessionItem) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// stream serves the session's AI SDK UI message stream from the journal's
// start; it follows live while the session is not final (?follow=true or
// false decides instead).
func (c *console) stream(w http.ResponseWriter, r *http.Request) {
	ref := events.SessionRef{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if err := events.ValidateSession(ref); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	live := false
	var s v1alpha1.AgentSession
	err := c.kube.Get(r.Context(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &s)
	switch {
	case err == nil:
		ref.UID, live = string(s.UID), !s.Status.Phase.IsFinal()
	case apierrors.IsNotFound(err): // deleted: its journal may still be there
	default:
		apiError(w, fmt.Errorf("get agentsession %s: %w", ref, err))
		return
	}
	if f := r.URL.Query().Get("follow"); f != "" {
		live = f == "true"
	}
	js, done, err := c.jetStream(r.Context(), ref.Namespace)
	if err != nil {
		http.Error(w, fmt.Sprintf("read events of namespace %s: %v", ref.Namespace, err), http.StatusBadGateway)
		return
	}
	defer done()
	src := uistream.JetStream{JS: js, Options: c.readOpts}
	uistream.Stream{Source: src, Session: ref, Live: live, KeepAlive: c.keepAlive}.ServeHTTP(w, r)
}

// get serves the AgentSession as the user reads it, without
// metadata.managedFields and the last-applied annotation, and with the
// plain values of environment variables redacted (a Secret is only ever
// named in an AgentSession; an env value is the one place a user may have
// pasted one).
func (c *console) get(w http.ResponseWriter, r *http.Request) {
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if err := events.ValidateSession(events.SessionRef{Namespace: key.Namespace, Name: key.Name}); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var s v1alpha1.AgentSession
	if err := c.kube.Get(r.Context(), key, &s); err != nil {
		apiError(w, fmt.Errorf("get agentsession %s: %w", key, err))
		return
	}
	writeJSON(w, http.StatusOK, consoleView(&s))
}

// redactedValue replaces the plain value of an environment variable.
const redactedValue = "[redacted]"

// consoleView is s as the console shows it (see get); s is modified.
func consoleView(s *v1alpha1.AgentSession) *v1alpha1.AgentSession {
	s.ManagedFields = nil
	delete(s.Annotations, lastAppliedAnnotation)
	for i := range s.Spec.Workspace.Env {
		if s.Spec.Workspace.Env[i].Value != "" {
			s.Spec.Workspace.Env[i].Value = redactedValue
		}
	}
	for i := range s.Spec.Tools.MCPServers {
		for j := range s.Spec.Tools.MCPServers[i].Env {
			if s.Spec.Tools.MCPServers[i].Env[j].Value != "" {
				s.Spec.Tools.MCPServers[i].Env[j].Value = redactedValue
			}
		}
	}
	// The typed object's kind is empty after a Get: the page may show it.
	s.APIVersion, s.Kind = v1alpha1.GroupVersion.String(), "AgentSession"
	return s
}

// lastAppliedAnnotation is kubectl apply's copy of the spec (with any env
// value).
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// diff serves the session's recorded patch as "kubectl agent diff" reads
// it (byte for byte, text/plain), 404 when there is none.
func (c *console) diff(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if err := events.ValidateSession(events.SessionRef{Namespace: ns, Name: name}); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ref, err := sessionRef(r.Context(), c.kube, ns, name)
	if err != nil {
		apiError(w, err)
		return
	}
	js, done, err := c.jetStream(r.Context(), ns)
	if err != nil {
		http.Error(w, fmt.Sprintf("read the changes of namespace %s: %v", ns, err), http.StatusBadGateway)
		return
	}
	defer done()
	patch, err := readPatch(r.Context(), js, ref)
	switch {
	case errors.Is(err, events.ErrNoChanges):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", "inline")
	_, _ = w.Write(patch)
}

// maxMessageBytes bounds the body of a steer or follow-up request.
const maxMessageBytes = 1 << 20

// act patches the session as the user, reusing the subcommands' code:
// steer and followup append to spec.messages ({"text": "..."} in the body),
// abort sets spec.abort, suspend and resume set spec.suspend.
func (c *console) act(w http.ResponseWriter, r *http.Request) {
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if err := events.ValidateSession(events.SessionRef{Namespace: key.Namespace, Name: key.Name}); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	var err error
	res := map[string]string{}
	switch action := r.PathValue("action"); action {
	case "steer", "followup":
		kind := v1alpha1.MessageSteer
		if action == "followup" {
			kind = v1alpha1.MessageFollowUp
		}
		text, ok := messageText(w, r)
		if !ok {
			return
		}
		res["message"], err = appendMessage(ctx, c.kube, key, kind, text)
	case "abort":
		err = abortSession(ctx, c.kube, key)
	case "suspend", "resume":
		err = suspendSession(ctx, c.kube, key, action == "suspend")
	default:
		http.Error(w, "unknown action "+strconv.Quote(action), http.StatusNotFound)
		return
	}
	if err != nil {
		apiError(w, err)
		return
	}
	res["status"] = "ok"
	writeJSON(w, http.StatusOK, res)
}

// messageText reads {"text": "..."} (application/json, which a form of
// another origin cannot send) or writes the error.
func messageText(w http.ResponseWriter, r *http.Request) (string, bool) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		http.Error(w, "the body must be application/json: {\"text\": \"...\"}", http.StatusUnsupportedMediaType)
		return "", false
	}
	var body struct {
		Text string `json:"text"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMessageBytes)).Decode(&body); err != nil {
		http.Error(w, "decode the body: "+err.Error(), http.StatusBadRequest)
		return "", false
	}
	if strings.TrimSpace(body.Text) == "" {
		http.Error(w, "empty text", http.StatusBadRequest)
		return "", false
	}
	return body.Text, true
}

// apiError writes err with the status of the API server's answer, 409 for
// a refusal by the session's state (a final session takes no message), or
// 502 when the API server did not answer.
func apiError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	var st apierrors.APIStatus
	var final finalPhaseError
	switch {
	case errors.As(err, &st) && st.Status().Code != 0:
		code = int(st.Status().Code)
	case errors.As(err, &final):
		code = http.StatusConflict
	}
	http.Error(w, err.Error(), code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
