package mcp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

func names(tools []tool.Registered) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Definition.Name)
	}
	return out
}

func TestConnectListsAllowedTools(t *testing.T) {
	srv := mcptest.New(t, 1) // one tool per page: listing must follow the cursor
	tests := []struct {
		name    string
		allowed []string
		denied  []string
		want    []string
	}{
		{name: "all", want: []string{"mcp__demo__echo", "mcp__demo__fail", "mcp__demo__get_weather", "mcp__demo__slow"}},
		{name: "allowed wildcard", allowed: []string{"e*", "get.*"}, want: []string{"mcp__demo__echo", "mcp__demo__get_weather"}},
		{name: "denied wins", allowed: []string{"*"}, denied: []string{"s?ow", "fail"}, want: []string{"mcp__demo__echo", "mcp__demo__get_weather"}},
		{name: "nothing allowed", allowed: []string{"nope*"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: srv.URL, AllowedTools: tt.allowed, DeniedTools: tt.denied})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := names(c.Tools())
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("tools = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConnectSchemaAndDescription(t *testing.T) {
	srv := mcptest.New(t, 0)
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: srv.URL, AllowedTools: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools := c.Tools()
	if len(tools) != 1 {
		t.Fatalf("tools = %v", names(tools))
	}
	d := tools[0].Definition
	if d.Description != "Echoes its text." {
		t.Errorf("description = %q", d.Description)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(d.Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || schema.Properties["text"] == nil || !slices.Contains(schema.Required, "text") {
		t.Errorf("schema = %s", d.Parameters)
	}
	// The loop's registry accepts it and validates calls with it.
	reg := tool.NewRegistry()
	if err := reg.Register(tools[0]); err != nil {
		t.Fatal(err)
	}
	if err := reg.Validate(d.Name, json.RawMessage(`{"text": 3}`)); err == nil {
		t.Error("a number for text was accepted")
	}
}

func TestCall(t *testing.T) {
	srv := mcptest.New(t, 0)
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: srv.URL, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer srv.Release() // the slow call's handler still runs after the client gave up
	byName := map[string]tool.Registered{}
	for _, r := range c.Tools() {
		byName[r.Definition.Name] = r
	}
	tests := []struct {
		tool, args string
		want       string
		isError    bool
		wantErr    string
	}{
		{tool: "mcp__demo__echo", args: `{"text":"hi"}`, want: "echo: hi"},
		{tool: "mcp__demo__get_weather", args: ``, want: "sunny"},
		{tool: "mcp__demo__fail", args: `{}`, want: "the thing is broken", isError: true},
		{tool: "mcp__demo__slow", args: `{}`, wantErr: "no answer within 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			r, ok := byName[tt.tool]
			if !ok {
				t.Fatalf("no tool %s in %v", tt.tool, names(c.Tools()))
			}
			res, err := r.Executor(t.Context(), &tool.Invocation{Name: tt.tool, Arguments: json.RawMessage(tt.args)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "mcp server demo") {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Output != tt.want || res.IsError != tt.isError {
				t.Fatalf("result = %+v, want %q isError=%v", res, tt.want, tt.isError)
			}
		})
	}
}

func TestCallAfterServerStopped(t *testing.T) {
	srv := mcptest.New(t, 0)
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: srv.URL, Timeout: 5 * time.Second, AllowedTools: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.Close()
	_, err = c.Tools()[0].Executor(t.Context(), &tool.Invocation{Arguments: json.RawMessage(`{"text":"hi"}`)})
	if err == nil || !strings.Contains(err.Error(), "mcp server demo, tool echo") {
		t.Fatalf("err = %v, want an error naming the server and tool", err)
	}
}

func TestConnectFails(t *testing.T) {
	stopped := mcptest.New(t, 0)
	stopped.Close()
	tests := []struct {
		name    string
		server  mcp.Server
		wantErr string
	}{
		{name: "unreachable", server: mcp.Server{Name: "gone", URL: stopped.URL, Timeout: time.Second}, wantErr: "connect to mcp server gone"},
		{name: "bad wildcard", server: mcp.Server{Name: "bad", URL: stopped.URL, DeniedTools: []string{"[a-"}}, wantErr: `tool wildcard "[a-"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mcp.Connect(t.Context(), tt.server)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestHeadersReachTheServer(t *testing.T) {
	srv := mcptest.New(t, 0)
	c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: srv.URL,
		Headers: map[string]string{"Authorization": "Bearer s3cret", "X-Team": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs := srv.Headers()
	if len(hs) == 0 {
		t.Fatal("no requests")
	}
	for i, h := range hs {
		if h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Team") != "blue" {
			t.Fatalf("request %d headers = %v", i, h)
		}
	}
}

func TestToolName(t *testing.T) {
	long := strings.Repeat("x", 80)
	tests := []struct {
		server, tool, want string
	}{
		{"demo", "echo", "mcp__demo__echo"},
		{"demo", "get.weather/now", "mcp__demo__get_weather_now"},
		{"my-srv", "Tool Name", "mcp__my-srv__Tool_Name"},
	}
	for _, tt := range tests {
		if got := mcp.ToolName(tt.server, tt.tool); got != tt.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", tt.server, tt.tool, got, tt.want)
		}
	}
	a, b := mcp.ToolName("demo", long+"a"), mcp.ToolName("demo", long+"b")
	if len(a) != mcp.MaxToolNameLen || len(b) != mcp.MaxToolNameLen || a == b {
		t.Errorf("cut names %q and %q: want %d characters each and different", a, b, mcp.MaxToolNameLen)
	}
}

// TestConnectWithoutStandaloneStream: a server that does not offer the
// standalone SSE stream (its GET answered with 405, or leniently another
// 4xx, or an error that is not an event stream) is connected and its tools
// called as before; only list_changed notifications cannot reach the
// client, so Refresh reports no change.
func TestConnectWithoutStandaloneStream(t *testing.T) {
	srv := mcptest.New(t, 0)
	target, err := url.Parse(srv.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, status := range []int{http.StatusMethodNotAllowed, http.StatusNotFound, 500} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			var gets atomic.Int32
			proxy := httputil.NewSingleHostReverseProxy(target)
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					gets.Add(1)
					http.Error(w, "no stream here", status)
					return
				}
				proxy.ServeHTTP(w, r)
			}))
			defer front.Close()
			c, err := mcp.Connect(t.Context(), mcp.Server{Name: "demo", URL: front.URL + "/mcp", Timeout: 5 * time.Second, AllowedTools: []string{"echo"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 3 {
				res, err := c.Tools()[0].Executor(t.Context(), &tool.Invocation{Arguments: json.RawMessage(`{"text":"hi"}`)})
				if err != nil || res.Output != "echo: hi" {
					t.Fatalf("call %d = %+v, %v", i, res, err)
				}
			}
			if _, changed, err := c.Refresh(t.Context()); changed || err != nil {
				t.Errorf("refresh = changed %v, %v", changed, err)
			}
			if gets.Load() == 0 {
				t.Error("the client never asked for the standalone stream: this test does not test what it names")
			}
		})
	}
}
