// Package mcptest serves a real MCP server, built with the official Go SDK,
// over streamable HTTP on an httptest.Server, for tests. Its tools have
// scripted behaviour: echo, fail (an isError result), slow (answers only
// when the call is cancelled or the server closes) and a tool whose name
// needs sanitizing. It records the HTTP headers of every request.
// NewSDKServer builds the same server for other transports: test/mcpserver
// serves it over stdio or HTTP as a binary. AddToolChanges adds tools that
// change the server's tool list at runtime (the SDK then sends
// notifications/tools/list_changed) and counts tools/list requests.
package mcptest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool names of the server.
const (
	Echo = "echo"
	Fail = "fail"
	Slow = "slow"
	// Dotted is a tool whose name has a character tool names may not have.
	Dotted = "get.weather"
)

// EchoArgs are the arguments of echo.
type EchoArgs struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

// Crash is the tool, offered when NewSDKServer is given a crash function,
// that calls it (the test binary exits mid-call).
const Crash = "crash"

// Server is a running MCP test server.
type Server struct {
	*httptest.Server
	// URL of the MCP endpoint.
	URL string

	// Changes is set with the option WithToolChanges.
	Changes *ToolChanges

	mu      sync.Mutex
	headers []http.Header
	release chan struct{}
	once    sync.Once
	sseOnly bool
	addr    string
}

// Option configures New.
type Option func(*Server, *sdk.Server)

// WithToolChanges adds the tools of AddToolChanges (Server.Changes).
func WithToolChanges() Option {
	return func(s *Server, srv *sdk.Server) { s.Changes = AddToolChanges(srv) }
}

// WithSSEOnly serves the 2024-11-05 HTTP+SSE transport (the SDK's
// SSEHandler: a GET opens the event stream, messages are POSTed to the
// endpoint it names) instead of streamable HTTP, which such a server
// refuses.
func WithSSEOnly() Option {
	return func(s *Server, _ *sdk.Server) { s.sseOnly = true }
}

// WithAddress serves on addr ("127.0.0.1:port") instead of a free port:
// a server that starts late at an address clients already try.
func WithAddress(addr string) Option {
	return func(s *Server, _ *sdk.Server) { s.addr = addr }
}

// New starts the server; it stops when the test ends. pageSize bounds the
// tools of one tools/list page (0: the SDK's default).
func New(t *testing.T, pageSize int, opts ...Option) *Server {
	t.Helper()
	s := &Server{release: make(chan struct{})}
	srv := NewSDKServer(pageSize, s.release, nil)
	for _, o := range opts {
		o(s, srv)
	}
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	if s.sseOnly {
		h = sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	if s.addr != "" {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			t.Fatalf("mcptest: listen on %s: %v", s.addr, err)
		}
		s.Server.Listener.Close()
		s.Server.Listener = ln
	}
	s.Server.Start()
	s.URL = s.Server.URL + "/mcp"
	t.Cleanup(s.Close)
	return s
}

// Release makes the slow tool's pending and later calls answer.
func (s *Server) Release() { s.once.Do(func() { close(s.release) }) }

// Close releases the slow tool's calls and stops the server. It cuts the
// clients' connections first: a client's open stream (the standalone SSE
// stream that carries notifications) would otherwise keep Close waiting.
func (s *Server) Close() {
	s.Release()
	s.Server.CloseClientConnections()
	s.Server.Close()
}

// Headers returns the headers of every request received so far.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.headers)
}

// NewSDKServer returns the test server's tools on an SDK server. The slow
// tool answers when its call is cancelled or release is closed; when crash
// is not nil, the crash tool calls it (and answers if it returns).
func NewSDKServer(pageSize int, release <-chan struct{}, crash func()) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "demo", Version: "v1"}, &sdk.ServerOptions{PageSize: pageSize})
	sdk.AddTool(srv, &sdk.Tool{Name: Echo, Description: "Echoes its text."},
		func(_ context.Context, _ *sdk.CallToolRequest, in EchoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: Fail, Description: "Always fails."},
		func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the thing is broken"}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: Slow, Description: "Never answers in time."},
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "too late"}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: Dotted, Description: "Returns the weather."},
		func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "sunny"}}}, nil, nil
		})
	if crash != nil {
		sdk.AddTool(srv, &sdk.Tool{Name: Crash, Description: "Makes the server exit."},
			func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
				crash()
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "still here"}}}, nil, nil
			})
	}
	return srv
}

// Tool names of AddToolChanges.
const (
	// AddTool adds a tool called by its argument name that answers
	// "<name>: <text>" (arguments as EchoArgs).
	AddTool = "add_tool"
	// RemoveTool removes the tool called by its argument name.
	RemoveTool = "remove_tool"
	// ToolsListed answers how many tools/list requests the server has
	// answered so far (a decimal number).
	ToolsListed = "tools_listed"
)

// NameArgs are the arguments of add_tool and remove_tool.
type NameArgs struct {
	Name string `json:"name" jsonschema:"the tool's name"`
}

// ToolChanges changes the tool list of an SDK server at runtime and counts
// its tools/list requests.
type ToolChanges struct {
	srv   *sdk.Server
	lists atomic.Int64
}

// AddToolChanges adds add_tool, remove_tool and tools_listed to srv and
// starts counting its tools/list requests.
func AddToolChanges(srv *sdk.Server) *ToolChanges {
	c := &ToolChanges{srv: srv}
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				c.lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	sdk.AddTool(srv, &sdk.Tool{Name: AddTool, Description: "Adds a tool that echoes its text after its name."},
		func(_ context.Context, _ *sdk.CallToolRequest, in NameArgs) (*sdk.CallToolResult, any, error) {
			c.Add(in.Name)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "added " + in.Name}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: RemoveTool, Description: "Removes a tool."},
		func(_ context.Context, _ *sdk.CallToolRequest, in NameArgs) (*sdk.CallToolResult, any, error) {
			c.Remove(in.Name)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "removed " + in.Name}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: ToolsListed, Description: "Says how many tools/list requests the server answered."},
		func(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.FormatInt(c.lists.Load(), 10)}}}, nil, nil
		})
	return c
}

// Add adds a tool called name answering "<name>: <text>"; the SDK notifies
// the connected clients.
func (c *ToolChanges) Add(name string) {
	sdk.AddTool(c.srv, &sdk.Tool{Name: name, Description: "Echoes its text after the name " + name + "."},
		func(_ context.Context, _ *sdk.CallToolRequest, in EchoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + ": " + in.Text}}}, nil, nil
		})
}

// Remove removes the tool called name; the SDK notifies the connected
// clients.
func (c *ToolChanges) Remove(name string) { c.srv.RemoveTools(name) }

// Lists returns how many tools/list requests the server answered.
func (c *ToolChanges) Lists() int { return int(c.lists.Load()) }
