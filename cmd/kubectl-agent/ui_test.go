package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

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
	log    *syncBuffer
	kube   client.Client
	key    client.ObjectKey
	events []loop.Event
}

func newConsoleEnv(t *testing.T, suffix string) *consoleEnv {
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
	con, err := newConsole(c, "default", g.eventSource, log)
	if err != nil {
		t.Fatal(err)
	}
	con.keepAlive = -1
	srv := httptest.NewServer(con.handler())
	t.Cleanup(srv.Close)
	return &consoleEnv{con: con, srv: srv, log: log, kube: c, key: client.ObjectKeyFromObject(parent), events: evs}
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
// cookies the token URL sets holds the token or the CSRF value.
func (e *consoleEnv) checkNoSecret(t *testing.T, resp *http.Response, body string) {
	t.Helper()
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
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "not built") {
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
	e := newConsoleEnv(t, "refuse")
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
	e := newConsoleEnv(t, "act")
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
	e := newConsoleEnv(t, "stream")
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
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "UI assets are not built") {
		t.Errorf("GET %s: %s %s", u, resp.Status, body)
	}
	plain, _ := url.Parse(u)
	plain.RawQuery = ""
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
