package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/looptest"
	"github.com/agent-operator/agent-operator/internal/mcp"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

// changingServers are the servers whose tool list changes at runtime: the
// remote test server, and test/mcpserver -stdio -tool-changes as a local
// process and behind a real executor stream.
func changingServers(t *testing.T) map[string]mcp.Server {
	t.Helper()
	srv := mcptest.New(t, 0, mcptest.WithToolChanges())
	old := mcptest.New(t, 0, mcptest.WithToolChanges(), mcptest.WithSSEOnly())
	servers := map[string]mcp.Server{
		"remote":                {Name: "demo", URL: srv.URL, Timeout: 20 * time.Second},
		"remote, 2024 HTTP+SSE": {Name: "demo", URL: old.URL, Timeout: 20 * time.Second},
	}
	for name, start := range starters(t, "-tool-changes") {
		servers["stdio, "+name] = mcp.Server{Name: "demo", Start: start, Command: []string{"mcpserver", "-stdio", "-tool-changes"},
			Timeout: 20 * time.Second}
	}
	return servers
}

// waitStale waits until the server's list_changed reached c.
func waitStale(ctx context.Context, c *mcp.Conn) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !c.Stale() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
	return nil
}

func callTool(t *testing.T, tools []tool.Registered, name, args string) tool.Result {
	t.Helper()
	for _, tl := range tools {
		if tl.Definition.Name == name {
			res, err := tl.Executor(t.Context(), &tool.Invocation{Name: name, Arguments: json.RawMessage(args)})
			if err != nil {
				t.Fatalf("call %s: %v", name, err)
			}
			return res
		}
	}
	t.Fatalf("no tool %s in %v", name, names(tools))
	return tool.Result{}
}

// listed asks the server how many tools/list requests it answered.
func listed(t *testing.T, c *mcp.Conn) int {
	t.Helper()
	n, err := strconv.Atoi(callTool(t, c.Tools(), "mcp__demo__"+mcptest.ToolsListed, `{}`).Output)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRefresh: Refresh lists the tools again only after the server's
// notifications/tools/list_changed, and then offers added tools (callable)
// and drops removed ones; without a notification it sends no tools/list.
func TestRefresh(t *testing.T) {
	for name, server := range changingServers(t) {
		t.Run(name, func(t *testing.T) {
			c, err := mcp.Connect(t.Context(), server)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := listed(t, c)
			if _, changed, err := c.Refresh(t.Context()); changed || err != nil {
				t.Fatalf("refresh without a notification: changed=%v err=%v", changed, err)
			}
			if n := listed(t, c); n != before {
				t.Fatalf("tools/list requests %d -> %d without a notification", before, n)
			}

			steps := []struct {
				tool, args string
				want       []string // tools named mcp__demo__added*, after the refresh
			}{
				{mcptest.AddTool, `{"name":"added"}`, []string{"mcp__demo__added"}},
				{mcptest.AddTool, `{"name":"added2"}`, []string{"mcp__demo__added", "mcp__demo__added2"}},
				{mcptest.RemoveTool, `{"name":"added"}`, []string{"mcp__demo__added2"}},
			}
			for i, st := range steps {
				callTool(t, c.Tools(), "mcp__demo__"+st.tool, st.args)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				if err := waitStale(ctx, c); err != nil {
					t.Fatalf("step %d: no list_changed: %v", i, err)
				}
				cancel()
				tools, changed, err := c.Refresh(t.Context())
				if err != nil || !changed {
					t.Fatalf("step %d: refresh after a notification: changed=%v err=%v", i, changed, err)
				}
				var got []string
				for _, n := range names(tools) {
					if strings.HasPrefix(n, "mcp__demo__added") {
						got = append(got, n)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, st.want) {
					t.Fatalf("step %d: added tools = %v, want %v", i, got, st.want)
				}
				if _, changed, _ := c.Refresh(t.Context()); changed {
					t.Fatalf("step %d: a second refresh reported a change", i)
				}
			}
			if n := listed(t, c); n != before+len(steps) {
				t.Errorf("tools/list requests: %d, want %d (one per notification)", n, before+len(steps))
			}
			if res := callTool(t, c.Tools(), "mcp__demo__added2", `{"text":"hi"}`); res.Output != "added2: hi" {
				t.Errorf("added tool answered %+v", res)
			}
		})
	}
}

// spy records the tool names of each model request.
type spy struct {
	inner loop.Client
	mu    sync.Mutex
	tools [][]string
}

func (s *spy) note(req *llm.Request) {
	var n []string
	for _, d := range req.Tools {
		n = append(n, d.Name)
	}
	s.mu.Lock()
	s.tools = append(s.tools, n)
	s.mu.Unlock()
}

func (s *spy) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	s.note(req)
	return s.inner.Complete(ctx, req)
}

func (s *spy) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.StreamEvent, error] {
	s.note(req)
	return s.inner.Stream(ctx, req)
}

// awaitingSource is the Conn as the loop's tool source, with add_tool and
// remove_tool answering only once the server's list_changed reached the
// Conn, so the next turn's refresh sees it (the notification is sent
// asynchronously after the change).
type awaitingSource struct{ c *mcp.Conn }

func (s awaitingSource) wrap(tools []tool.Registered) []tool.Registered {
	out := slices.Clone(tools)
	for i, tl := range out {
		if n := tl.Definition.Name; n != "mcp__demo__"+mcptest.AddTool && n != "mcp__demo__"+mcptest.RemoveTool {
			continue
		}
		inner := tl.Executor
		out[i].Executor = func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
			res, err := inner(ctx, inv)
			if err != nil {
				return res, err
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return res, waitStale(ctx, s.c)
		}
	}
	return out
}

func (s awaitingSource) Tools() []tool.Registered { return s.wrap(s.c.Tools()) }

func (s awaitingSource) Refresh(ctx context.Context) ([]tool.Registered, bool, error) {
	tools, changed, err := s.c.Refresh(ctx)
	return s.wrap(tools), changed, err
}

// TestRefreshThroughTheLoop: a remote and a stdio server each add a tool
// during a turn; the next model request offers it and the model calls it;
// once removed, it leaves the request and a call to it gets an error result
// saying so; a WARNING event says what changed; and over six turns the
// server listed its tools once per notification, never otherwise.
func TestRefreshThroughTheLoop(t *testing.T) {
	for name, server := range changingServers(t) {
		t.Run(name, func(t *testing.T) {
			c, err := mcp.Connect(t.Context(), server)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := listed(t, c)
			script := looptest.Script(
				looptest.Tools(looptest.Call("mcp__demo__add_tool", map[string]string{"name": "added"})),
				scripted.Turn{Expect: looptest.ExpectResult("added added"),
					ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__added", map[string]string{"text": "hi"})}},
				scripted.Turn{Expect: looptest.ExpectResult("added: hi"),
					ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__remove_tool", map[string]string{"name": "added"})}},
				scripted.Turn{Expect: looptest.ExpectResult("removed added"),
					ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__added", map[string]string{"text": "again"})}},
				scripted.Turn{Expect: looptest.ExpectResult("no longer available"),
					ToolCalls: []scripted.ToolCall{looptest.Call("mcp__demo__tools_listed", map[string]string{})}},
				scripted.Turn{Expect: looptest.ExpectResult(strconv.Itoa(before + 2)), Text: "Done."},
			)
			p := profile.Anthropic("claude-sonnet-4-5")
			env, _ := looptest.NewEnv(t)
			rec := &spy{}
			sess := looptest.NewSession(t, func(_ *testing.T, p loop.Profile, s *scripted.Script) loop.Client {
				rec.inner = scripted.New(s, p.Model())
				return rec
			}, p, env, script, loop.WithExtraToolSource("MCP server demo", awaitingSource{c}))
			events := looptest.Record(sess)
			if err := sess.Submit(t.Context(), "change the demo server's tools"); err != nil {
				t.Fatal(err) // a turn's Expect failing fails the model call
			}
			_ = sess.Close()
			evs := events.All(t)

			if len(rec.tools) != 6 {
				t.Fatalf("%d model requests, want 6", len(rec.tools))
			}
			for i, want := range []bool{false, true, true, false, false, false} {
				if got := slices.Contains(rec.tools[i], "mcp__demo__added"); got != want {
					t.Errorf("request %d offers mcp__demo__added: %v, want %v (tools %v)", i, got, want, rec.tools[i])
				}
			}
			ends := looptest.OfKind(evs, loop.EventToolCallEnd)
			if len(ends) != 5 {
				t.Fatalf("%d tool call ends, want 5", len(ends))
			}
			if ends[1].Data.Output != "added: hi" {
				t.Errorf("the added tool answered %+v", ends[1].Data)
			}
			if e := ends[3].Data; !e.IsError || !strings.Contains(e.Error, "MCP server demo stopped offering it") {
				t.Errorf("the removed tool's call = %+v, want an error saying the server stopped offering it", e)
			}
			var warnings []string
			for _, e := range looptest.OfKind(evs, loop.EventWarning) {
				warnings = append(warnings, e.Data.Message)
			}
			n := len(c.Tools())
			want := []string{
				"MCP server demo now offers " + strconv.Itoa(n+1) + " tools (+mcp__demo__added)",
				"MCP server demo now offers " + strconv.Itoa(n) + " tools (-mcp__demo__added)",
			}
			if !slices.Equal(warnings, want) {
				t.Errorf("warnings = %q, want %q", warnings, want)
			}
		})
	}
}

// TestNotificationStreamCut: a proxy that cuts the long-lived notification
// stream (as an idle timeout does) never breaks tool calls; the stream is
// opened again, the tools are listed again once (a change may have been
// missed meanwhile), and later changes still arrive.
func TestNotificationStreamCut(t *testing.T) {
	srv := mcptest.New(t, 0, mcptest.WithToolChanges())
	target, err := url.Parse(srv.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	var gets atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the stream: cut after 50ms
			gets.Add(1)
			ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
			defer cancel()
			r = r.WithContext(ctx)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: front.URL + "/mcp", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := waitStale(ctx, c); err != nil { // the stream was cut and opened again
		t.Fatalf("no relisting after the stream was cut: %v", err)
	}
	if gets.Load() < 2 {
		t.Fatalf("%d stream requests, want a reconnect", gets.Load())
	}
	if res := callTool(t, c.Tools(), "mcp__demo__echo", `{"text":"still here"}`); res.Output != "echo: still here" {
		t.Fatalf("echo after the cut = %+v", res)
	}
	lists := srv.Changes.Lists()
	if _, _, err := c.Refresh(t.Context()); err != nil || srv.Changes.Lists() != lists+1 {
		t.Fatalf("refresh after a reconnect: err=%v, tools/list %d -> %d, want one", err, lists, srv.Changes.Lists())
	}
	srv.Changes.Add("late")
	if err := waitStale(ctx, c); err != nil {
		t.Fatalf("no notification after the reconnect: %v", err)
	}
	tools, _, err := c.Refresh(t.Context())
	if err != nil || !slices.Contains(names(tools), "mcp__demo__late") {
		t.Fatalf("tools after a later change = %v, %v", names(tools), err)
	}
	if res := callTool(t, tools, "mcp__demo__late", `{"text":"hi"}`); res.Output != "late: hi" {
		t.Fatalf("late = %+v", res)
	}
}
