package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/uistream"
)

// syncBuffer is a log buffer written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// consoleEnv is a console over envtest and an embedded NATS server whose
// journal holds the events of session "ui-<suffix>" (a child
// "ui-<suffix>-sub-1" exists too), reached with --nats-url as by logs.
type consoleEnv struct {
	con    *console
	srv    *httptest.Server
	pub    *events.Publisher
	log    *syncBuffer
	kube   client.Client
	key    client.ObjectKey
	events []loop.Event
}

// The console serves ui: the placeholder page when it has no index.html.
func newConsoleEnv(t *testing.T, suffix string, ui fstest.MapFS) *consoleEnv {
	t.Helper()
	ctx := t.Context()
	nsrv, pub := eventstest.Start(t, events.EmbeddedOptions{Port: -1}, events.PublisherOptions{})
	c := kubeClient(t)
	model := v1alpha1.ModelSpec{Provider: v1alpha1.ProviderOpenAICompatible, Name: "m-" + suffix, BaseURL: "http://llm"}
	parent := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ui-" + suffix},
		Spec: v1alpha1.AgentSessionSpec{Prompt: "p", Model: model}}
	if err := c.Create(ctx, parent); err != nil {
		t.Fatal(err)
	}
	parent.Status.Phase, parent.Status.Turns, parent.Status.Usage.Total, parent.Status.Cost = v1alpha1.PhaseRunning, 3, 120, "0.42"
	if err := c.Status().Update(ctx, parent); err != nil {
		t.Fatal(err)
	}
	child := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ui-" + suffix + "-sub-1"},
		Spec: v1alpha1.AgentSessionSpec{Prompt: "q", Model: model, Depth: ptr.To[int32](1),
			ParentRef: &v1alpha1.ParentReference{Name: parent.Name, UID: string(parent.UID)}}}
	if err := c.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	ref := events.SessionRef{Namespace: "default", Name: parent.Name, UID: string(parent.UID)}
	j, _, err := pub.OpenJournal(ctx, ref, events.JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	evs := []loop.Event{
		{Kind: loop.EventSessionStart, Data: loop.EventData{State: "IDLE"}},
		{Kind: loop.EventUserInput, Data: loop.EventData{Content: "p"}},
		{Kind: loop.EventAssistantTextStart},
		{Kind: loop.EventAssistantTextDelta, Data: loop.EventData{Delta: "hel"}},
		{Kind: loop.EventAssistantTextDelta, Data: loop.EventData{Delta: "lo"}},
		{Kind: loop.EventAssistantTextEnd, Data: loop.EventData{Text: "hello"}},
		{Kind: loop.EventToolCallStart, Data: loop.EventData{ToolName: "shell", CallID: "c1", Arguments: json.RawMessage(`{"command":"ls"}`)}},
		{Kind: loop.EventToolCallEnd, Data: loop.EventData{ToolName: "shell", CallID: "c1", Output: "a.go\n"}},
		{Kind: loop.EventSessionEnd, Data: loop.EventData{State: "CLOSED"}},
	}
	for i := range evs {
		evs[i].Seq, evs[i].Time, evs[i].SessionID = uint64(i+1), t0, ref.UID
		if err := j.Append(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	g := &globals{kubeconfig: kubeconfigPath, natsURL: nsrv.ClientURL()}
	log := &syncBuffer{}
	con, err := newConsole(c, "default", g, log)
	if err != nil {
		t.Fatal(err)
	}
	con.keepAlive = -1
	con.ui = ui
	srv := httptest.NewServer(con.handler())
	t.Cleanup(srv.Close)
	return &consoleEnv{con: con, srv: srv, pub: pub, log: log, kube: c, key: client.ObjectKeyFromObject(parent), events: evs}
}

// do sends a request; headers are name/value pairs; "Host" sets the host.
func (e *consoleEnv) do(t *testing.T, hc *http.Client, method, path, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	e.checkNoSecret(t, resp, string(b))
	return resp, string(b)
}

// checkNoSecret fails when a response body or header other than the
// cookies the token URL sets holds the token or the CSRF value, except for
// the CSRF value in the page's csrf-token meta tag.
func (e *consoleEnv) checkNoSecret(t *testing.T, resp *http.Response, body string) {
	t.Helper()
	if resp.Request.URL.Path == "/" {
		body = strings.Replace(body, e.csrfMetaTag(), "", 1)
	}
	for _, s := range []string{e.con.token, e.con.csrf} {
		if strings.Contains(body, s) {
			t.Errorf("%s %s: the body holds a console secret", resp.Request.Method, resp.Request.URL.Path)
		}
		for k, vs := range resp.Header {
			if k != "Set-Cookie" && strings.Contains(strings.Join(vs, " "), s) {
				t.Errorf("%s %s: header %s holds a console secret", resp.Request.Method, resp.Request.URL.Path, k)
			}
		}
	}
}

// csrfMetaTag is the tag the console injects into the built index.html.
func (e *consoleEnv) csrfMetaTag() string {
	return `<meta name="csrf-token" content="` + e.con.csrf + `">`
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// browser is a client with a cookie jar that opened the token URL.
func (e *consoleEnv) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Jar: jar}
	resp, body := e.do(t, hc, http.MethodGet, "/?token="+url.QueryEscape(e.con.token), "")
	if resp.StatusCode != http.StatusOK || (!strings.Contains(body, "not built") && !strings.Contains(body, e.csrfMetaTag())) {
		t.Fatalf("token URL: %s %q", resp.Status, body)
	}
	if resp.Request.URL.RawQuery != "" {
		t.Errorf("the token URL was not redirected away: %s", resp.Request.URL)
	}
	return hc
}

func (e *consoleEnv) csrfValue(t *testing.T, hc *http.Client) string {
	t.Helper()
	u, _ := url.Parse(e.srv.URL)
	for _, ck := range hc.Jar.Cookies(u) {
		if strings.HasPrefix(ck.Name, csrfCookie) {
			return ck.Value
		}
	}
	t.Fatal("no CSRF cookie")
	return ""
}

func (e *consoleEnv) session(t *testing.T) v1alpha1.AgentSession {
	t.Helper()
	var s v1alpha1.AgentSession
	if err := e.kube.Get(t.Context(), e.key, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Requests without the token, with a wrong one, for another host name,
// mutating ones from another origin or without the CSRF header, and
// mutations by GET are all refused, and change nothing.
func TestConsoleRefusals(t *testing.T) {
	e := newConsoleEnv(t, "refuse", nil)
	port := e.srv.URL[strings.LastIndex(e.srv.URL, ":")+1:]
	good := e.con.token
	cookie := consoleCookie + port + "=" + good
	csrf := e.con.csrf
	abort := "/api/sessions/default/" + e.key.Name + "/abort"
	hc := &http.Client{CheckRedirect: noRedirect}
	tests := []struct {
		name    string
		method  string
		path    string
		headers []string
		want    int
	}{
		{"no token", "GET", "/api/sessions", nil, 401},
		{"no token for the page", "GET", "/", nil, 401},
		{"no token for the stream", "GET", "/api/sessions/default/" + e.key.Name + "/stream", nil, 401},
		{"no token for the session", "GET", "/api/sessions/default/" + e.key.Name, nil, 401},
		{"no token for the diff", "GET", "/api/sessions/default/" + e.key.Name + "/diff", nil, 401},
		{"no token for an asset", "GET", "/assets/index.js", nil, 401},
		{"wrong header token", "GET", "/api/sessions", []string{tokenHeader, "x" + good}, 403},
		{"wrong bearer token", "GET", "/api/sessions", []string{"Authorization", "Bearer nope"}, 403},
		{"wrong cookie", "GET", "/api/sessions", []string{"Cookie", consoleCookie + port + "=nope"}, 403},
		{"wrong token URL", "GET", "/?token=nope", nil, 403},
		{"token URL of a POST", "POST", abort + "?token=" + good, []string{csrfHeader, csrf}, 403},
		{"no token for a mutation", "POST", abort, []string{csrfHeader, csrf}, 401},
		{"foreign host name (DNS rebinding)", "GET", "/api/sessions", []string{"Host", "evil.example:" + port, tokenHeader, good}, 421},
		{"mutation without CSRF header", "POST", abort, []string{"Cookie", cookie}, 403},
		{"mutation with a wrong CSRF header", "POST", abort, []string{"Cookie", cookie, csrfHeader, "nope"}, 403},
		{"mutation from another origin", "POST", abort, []string{"Cookie", cookie, csrfHeader, csrf, "Origin", "http://evil.example"}, 403},
		{"mutation from another origin with the header token", "POST", abort, []string{tokenHeader, good, "Origin", "http://evil.example"}, 403},
		{"cross-site fetch", "POST", abort, []string{"Cookie", cookie, csrfHeader, csrf, "Sec-Fetch-Site", "cross-site"}, 403},
		{"mutation by GET", "GET", abort, []string{tokenHeader, good}, 405},
		{"unknown action", "POST", "/api/sessions/default/" + e.key.Name + "/delete", []string{tokenHeader, good}, 404},
		{"steer as a form", "POST", "/api/sessions/default/" + e.key.Name + "/steer", []string{tokenHeader, good, "Content-Type", "application/x-www-form-urlencoded"}, 415},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(t, hc, tt.method, tt.path, "", tt.headers...)
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
		})
	}
	if s := e.session(t); s.Spec.Abort || len(s.Spec.Messages) > 0 {
		t.Errorf("a refused request changed the session: %+v", s.Spec)
	}
	if strings.Contains(e.log.String(), good) || strings.Contains(e.log.String(), csrf) {
		t.Errorf("the log holds a console secret:\n%s", e.log.String())
	}
}

// The token URL sets an HttpOnly, SameSite=Strict cookie and redirects to
// a URL without the token; the cookie then lists the sessions as the
// kubeconfig's user, and the CSRF cookie lets the page patch them the way
// the subcommands do.
func TestConsoleListAndActions(t *testing.T) {
	e := newConsoleEnv(t, "act", nil)
	resp, _ := e.do(t, &http.Client{CheckRedirect: noRedirect}, http.MethodGet, "/?token="+url.QueryEscape(e.con.token), "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("token URL: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	var tokenCookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if strings.HasPrefix(ck.Name, consoleCookie) && !strings.HasPrefix(ck.Name, csrfCookie) {
			tokenCookie = ck
		}
	}
	if tokenCookie == nil || !tokenCookie.HttpOnly || tokenCookie.SameSite != http.SameSiteStrictMode || tokenCookie.Value != e.con.token {
		t.Errorf("token cookie %+v", tokenCookie)
	}

	hc := e.browser(t)
	resp, body := e.do(t, hc, http.MethodGet, "/api/sessions", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list: %s %s", resp.Status, body)
	}
	var list struct{ Items []sessionItem }
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	found := map[string]sessionItem{}
	for _, it := range list.Items {
		found[it.Name] = it
	}
	p, c := found[e.key.Name], found[e.key.Name+"-sub-1"]
	if p.Phase != "Running" || p.Model != "m-act" || p.Turns != 3 || p.Tokens != 120 || p.Cost != "0.42" || p.Namespace != "default" || p.Created.IsZero() {
		t.Errorf("parent row %+v", p)
	}
	if c.Parent != e.key.Name {
		t.Errorf("child row %+v", c)
	}
	if _, body := e.do(t, hc, http.MethodGet, "/api/sessions?namespace=other", ""); strings.Contains(body, e.key.Name) {
		t.Errorf("namespace filter ignored: %s", body)
	}

	csrf := e.csrfValue(t, hc)
	base := "/api/sessions/default/" + e.key.Name + "/"
	steps := []struct {
		action, body string
		check        func(s v1alpha1.AgentSession) bool
	}{
		{"steer", `{"text":"look at main.go"}`, func(s v1alpha1.AgentSession) bool {
			return len(s.Spec.Messages) == 1 && s.Spec.Messages[0].Kind == v1alpha1.MessageSteer && s.Spec.Messages[0].Text == "look at main.go"
		}},
		{"followup", `{"text":"then the docs"}`, func(s v1alpha1.AgentSession) bool {
			return len(s.Spec.Messages) == 2 && s.Spec.Messages[1].Kind == v1alpha1.MessageFollowUp && s.Spec.Messages[1].Name == "follow-up-2"
		}},
		{"suspend", "", func(s v1alpha1.AgentSession) bool { return s.Spec.Suspend }},
		{"resume", "", func(s v1alpha1.AgentSession) bool { return !s.Spec.Suspend }},
		{"abort", "", func(s v1alpha1.AgentSession) bool { return s.Spec.Abort }},
	}
	for _, st := range steps {
		resp, body := e.do(t, hc, http.MethodPost, base+st.action, st.body, csrfHeader, csrf, "Content-Type", "application/json",
			"Origin", e.srv.URL, "Sec-Fetch-Site", "same-origin")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", st.action, resp.Status, body)
		}
		if s := e.session(t); !st.check(s) {
			t.Errorf("after %s: spec %+v", st.action, s.Spec)
		}
	}
	// A script with the header token needs no CSRF header.
	resp, body = e.do(t, http.DefaultClient, http.MethodPost, base+"steer", `{"text":"x"}`, tokenHeader, e.con.token, "Content-Type", "application/json")
	if resp.StatusCode != http.StatusOK || len(e.session(t).Spec.Messages) != 3 {
		t.Errorf("steer with the header token: %s %s", resp.Status, body)
	}
	s := e.session(t)
	s.Status.Phase = v1alpha1.PhaseAborted
	if err := e.kube.Status().Update(t.Context(), &s); err != nil {
		t.Fatal(err)
	}
	resp, body = e.do(t, hc, http.MethodPost, base+"followup", `{"text":"more"}`, csrfHeader, csrf, "Content-Type", "application/json")
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "session is Aborted") {
		t.Errorf("follow-up to an aborted session: %s %s", resp.Status, body)
	}
	resp, _ = e.do(t, hc, http.MethodPost, "/api/sessions/default/nope/abort", "", csrfHeader, csrf)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("abort of a missing session: %s", resp.Status)
	}
	if strings.Contains(e.log.String(), e.con.token) || !strings.Contains(e.log.String(), "POST "+base+"abort 200") {
		t.Errorf("log:\n%s", e.log.String())
	}
}

// The stream endpoint serves the session's journal, read with the same
// connection path as logs, as an AI SDK UI message stream.
func TestConsoleStream(t *testing.T) {
	e := newConsoleEnv(t, "stream", nil)
	conv := uistream.NewConverter(string(e.session(t).UID))
	var want []string
	for _, ev := range e.events {
		for _, c := range conv.Event(ev) {
			b, _ := json.Marshal(c)
			want = append(want, "data: "+string(b))
		}
	}
	for _, c := range conv.Finish() {
		b, _ := json.Marshal(c)
		want = append(want, "data: "+string(b))
	}
	want = append(want, "data: [DONE]")
	// Running, so followed live: the journal's SESSION_END(CLOSED) ends it.
	for _, q := range []string{"", "?follow=false"} {
		resp, body := e.do(t, http.DefaultClient, http.MethodGet, "/api/sessions/default/"+e.key.Name+"/stream"+q, "", tokenHeader, e.con.token)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(uistream.HeaderName) != uistream.HeaderValue {
			t.Fatalf("%q: %s %s", q, resp.Status, body)
		}
		got := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%q: stream\n%s\nwant\n%s", q, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	resp, _ := e.do(t, http.DefaultClient, http.MethodGet, "/api/sessions/default/Bad_Name/stream", "", tokenHeader, e.con.token)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("invalid name: %s", resp.Status)
	}
}

// kubectl agent ui prints the URL with the token, serves it on 127.0.0.1,
// opens no browser without a terminal, and stops with its context.
func TestUICommand(t *testing.T) {
	t.Setenv("CI", "")
	pr, pw := io.Pipe()
	root := newRoot()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetIn(strings.NewReader(""))
	root.SetArgs([]string{"--kubeconfig", kubeconfigPath, "ui"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	u, ok := strings.CutPrefix(strings.TrimSpace(line), "Console: ")
	if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.Contains(u, "/?token=") {
		t.Fatalf("printed %q", line)
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The page of the binary's embedded frontend: built by make ui or not.
	_, statErr := fs.Stat(uiDist, "ui/dist/index.html")
	want := "UI assets are not built"
	if statErr == nil {
		want = `<meta name="csrf-token" content="`
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		t.Errorf("GET %s: %s, want %q in %s", u, resp.Status, want, body)
	}
	plain, _ := url.Parse(u)
	plain.RawQuery = ""
	if statErr == nil {
		// The page's script, as vite named it, is embedded and served.
		_, rest, _ := strings.Cut(string(body), `src="./assets/`)
		script, _, _ := strings.Cut(rest, `"`)
		resp, err := (&http.Client{Jar: jar}).Get(plain.String() + "assets/" + script)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
			t.Errorf("GET assets/%s: %s %q", script, resp.Status, resp.Header.Get("Content-Type"))
		}
	}
	if resp, err := http.Get(plain.String() + "api/sessions"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %v %v", resp, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ui returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ui did not stop")
	}
}

func TestMayOpenBrowser(t *testing.T) {
	t.Setenv("CI", "true")
	if mayOpenBrowser(strings.NewReader("")) {
		t.Error("opens a browser in CI")
	}
	t.Setenv("CI", "")
	if mayOpenBrowser(strings.NewReader("")) {
		t.Error("opens a browser without a terminal on stdin")
	}
}

// suspend and resume set spec.suspend with the code the console uses.
func TestSuspendResumeCommands(t *testing.T) {
	c := kubeClient(t)
	s := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "suspend-test"},
		Spec: v1alpha1.AgentSessionSpec{Prompt: "p", Model: v1alpha1.ModelSpec{Provider: v1alpha1.ProviderOpenAICompatible, Name: "m", BaseURL: "http://llm"}}}
	if err := c.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		cmd  string
		want bool
	}{{"suspend", true}, {"resume", false}} {
		out, err := cli(t, "", step.cmd, s.Name)
		if err != nil {
			t.Fatalf("%s: %v", step.cmd, err)
		}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
		if s.Spec.Suspend != step.want || !strings.Contains(out, step.cmd[:len(step.cmd)-1]) {
			t.Errorf("after %s: suspend=%v, printed %q", step.cmd, s.Spec.Suspend, out)
		}
	}
	if _, err := cli(t, "", "suspend", "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("suspend of a missing session: %v", err)
	}
}

// builtUI is a frontend as vite builds it: index.html loading hashed assets.
var builtUI = fstest.MapFS{
	"index.html": {Data: []byte(`<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <title>agent-operator console</title>
    <script type="module" crossorigin src="./assets/index-B1x2c3.js"></script>
    <link rel="stylesheet" crossorigin href="./assets/index-D4e5f6.css">
  </head>
  <body><div id="root"></div></body>
</html>
`)},
	"assets/index-B1x2c3.js":  {Data: []byte("console.log('console');\n")},
	"assets/index-D4e5f6.css": {Data: []byte("body{margin:0}\n")},
	"assets/fonts/x.woff2":    {Data: []byte("wOF2")},
}

// The built frontend: index.html with this run's CSRF value in a meta tag
// before </head>, never cached; its hashed assets with their content types,
// cached for long, and only with the token; the CSRF value of the meta tag
// in the header the page sends lets the page act.
func TestConsoleFrontend(t *testing.T) {
	e := newConsoleEnv(t, "front", builtUI)
	hc := e.browser(t)
	resp, body := e.do(t, hc, http.MethodGet, "/", "")
	meta := e.csrfMetaTag()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, meta+"</head>") || strings.Count(body, e.con.csrf) != 1 ||
		!strings.Contains(body, `src="./assets/index-B1x2c3.js"`) {
		t.Fatalf("index: %s\n%s", resp.Status, body)
	}
	for k, want := range map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Cache-Control":           "no-cache, no-store",
		"Content-Security-Policy": "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("index: %s %q, want %q", k, got, want)
		}
	}

	tests := []struct {
		path, ctype, body string
		status            int
	}{
		{"/assets/index-B1x2c3.js", "text/javascript; charset=utf-8", "console.log('console');\n", 200},
		{"/assets/index-D4e5f6.css", "text/css; charset=utf-8", "body{margin:0}\n", 200},
		{"/assets/fonts/x.woff2", "font/woff2", "wOF2", 200},
		{"/assets/missing.js", "", "", 404},
		{"/assets/fonts", "", "", 404},
		{"/index.html", "", "", 404},
	}
	for _, tt := range tests {
		resp, body := e.do(t, hc, http.MethodGet, tt.path, "")
		if resp.StatusCode != tt.status {
			t.Errorf("%s: %s, want %d", tt.path, resp.Status, tt.status)
			continue
		}
		if tt.status != 200 {
			continue
		}
		if body != tt.body || resp.Header.Get("Content-Type") != tt.ctype || resp.Header.Get("Cache-Control") != "private, max-age=31536000, immutable" {
			t.Errorf("%s: %q, Content-Type %q, Cache-Control %q", tt.path, body, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
		}
	}
	if resp, _ := e.do(t, http.DefaultClient, http.MethodGet, "/assets/index-B1x2c3.js", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an asset without the token: %s", resp.Status)
	}

	// The page reads the meta tag and sends it in X-Agent-Console-CSRF
	// (web/console/src/api.ts), with the token in its cookie.
	i := strings.Index(body, meta)
	value := body[i+len(`<meta name="csrf-token" content="`) : i+len(meta)-2]
	resp, body = e.do(t, hc, http.MethodPost, "/api/sessions/default/"+e.key.Name+"/steer", `{"text":"from the page"}`,
		"X-Agent-Console-CSRF", value, "Content-Type", "application/json", "Origin", e.srv.URL, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("steer with the meta tag's CSRF value: %s %s", resp.Status, body)
	}
	if s := e.session(t); len(s.Spec.Messages) != 1 || s.Spec.Messages[0].Text != "from the page" {
		t.Errorf("after steer: %+v", s.Spec.Messages)
	}
}

// Without an index.html (a binary built without make ui) the page is the
// placeholder, which holds no CSRF value, and there are no assets.
func TestConsolePlaceholder(t *testing.T) {
	e := newConsoleEnv(t, "holder", fstest.MapFS{"assets/index-B1x2c3.js": builtUI["assets/index-B1x2c3.js"]})
	hc := e.browser(t)
	resp, body := e.do(t, hc, http.MethodGet, "/", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "make ui") || strings.Contains(body, "csrf-token") ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("placeholder: %s %q\n%s", resp.Status, resp.Header.Get("Cache-Control"), body)
	}
}

// GET a session serves the AgentSession as the user reads it, without
// managedFields, kubectl's last-applied copy or env values; GET its diff
// serves the recorded patch byte for byte, or 404 when there is none.
func TestConsoleSessionAndDiff(t *testing.T) {
	e := newConsoleEnv(t, "get", nil)
	ctx := t.Context()
	s := &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ui-get-env",
		Annotations: map[string]string{lastAppliedAnnotation: `{"spec":{"workspace":{"env":[{"name":"TOKEN","value":"hunter2"}]}}}`, "team": "a"}},
		Spec: v1alpha1.AgentSessionSpec{Prompt: "p", Model: v1alpha1.ModelSpec{Provider: v1alpha1.ProviderOpenAICompatible, Name: "m", BaseURL: "http://llm"},
			Workspace: v1alpha1.WorkspaceSpec{Env: []corev1.EnvVar{{Name: "TOKEN", Value: "hunter2"},
				{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}, Key: "k"}}}}}}}
	if err := e.kube.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if len(e.session(t).ManagedFields) == 0 {
		t.Fatal("the API server recorded no managedFields: the test would prove nothing")
	}
	hc := e.browser(t)
	for _, name := range []string{e.key.Name, s.Name} {
		resp, body := e.do(t, hc, http.MethodGet, "/api/sessions/default/"+name, "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("get %s: %s %s", name, resp.Status, body)
		}
		var got v1alpha1.AgentSession
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		if got.Name != name || got.UID == "" || got.Kind != "AgentSession" || got.APIVersion != "agent-operator.dev/v1alpha1" ||
			got.ManagedFields != nil || strings.Contains(body, "managedFields") || strings.Contains(body, "hunter2") {
			t.Errorf("get %s: %s", name, body)
		}
		if name == e.key.Name && (got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Turns != 3 || got.Spec.Model.Name != "m-get") {
			t.Errorf("get %s: status %+v spec %+v", name, got.Status, got.Spec)
		}
		if name == s.Name {
			env := got.Spec.Workspace.Env
			if len(env) != 2 || env[0].Value != redactedValue || env[1].ValueFrom == nil || env[1].ValueFrom.SecretKeyRef.Name != "keys" ||
				got.Annotations["team"] != "a" || got.Annotations[lastAppliedAnnotation] != "" {
				t.Errorf("get %s: env %+v, annotations %v", name, env, got.Annotations)
			}
		}
	}
	if resp, body := e.do(t, hc, http.MethodGet, "/api/sessions/default/nope", ""); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "not found") {
		t.Errorf("get a missing session: %s %s", resp.Status, body)
	}
	if resp, _ := e.do(t, hc, http.MethodGet, "/api/sessions/default/Bad_Name", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("get an invalid name: %s", resp.Status)
	}

	resp, body := e.do(t, hc, http.MethodGet, "/api/sessions/default/"+e.key.Name+"/diff", "")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "has no recorded changes") {
		t.Errorf("diff without a change: %s %s", resp.Status, body)
	}
	storeChanges(t, e.pub, "ui-get-gone")
	resp, body = e.do(t, hc, http.MethodGet, "/api/sessions/default/ui-get-gone/diff", "")
	if resp.StatusCode != http.StatusOK || body != storedPatch || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("diff of a recorded change: %s %q %q", resp.Status, resp.Header.Get("Content-Type"), body)
	}
}
