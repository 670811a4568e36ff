package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// DefaultTimeout bounds connecting and each tool call when Server.Timeout
// is zero.
const DefaultTimeout = 30 * time.Second

// MaxToolNameLen is the longest tool name every provider accepts
// (^[a-zA-Z0-9_-]{1,64}$ for OpenAI and Anthropic; Gemini allows 64 too).
const MaxToolNameLen = 64

// MaxListedTools bounds the tools read from one server's tools/list pages:
// a server offering more (or paging forever) costs the shared manager no
// more than this; the rest are left out with a warning.
const MaxListedTools = 1000

// Prefix starts the name of every MCP tool offered to the model.
const Prefix = "mcp__"

// Server is one MCP server to connect to: a remote one (URL) or a stdio
// one (Start).
type Server struct {
	// Name identifies the server in tool names (mcp__<Name>__<tool>).
	Name string
	// URL is the streamable HTTP endpoint of a remote server.
	URL string
	// Start, when set, makes this a stdio server: it starts the server's
	// process and returns its stdout (Read) and stdin (Write); Close ends
	// the process. URL and Headers are then unused. A Read error once the
	// process has ended should say how it ended: it is what the server's
	// tools report from then on.
	Start func(ctx context.Context) (io.ReadWriteCloser, error)
	// Command names a stdio server's command in messages.
	Command []string
	// Headers are sent on every HTTP request to the server. Their values
	// never appear in errors.
	Headers map[string]string
	// Timeout bounds connecting (initialize and listing the tools) and each
	// tool call; zero means DefaultTimeout.
	Timeout time.Duration
	// AllowedTools are path.Match wildcards over the server's own tool
	// names: when not empty, only matching tools are offered.
	AllowedTools []string
	// DeniedTools are path.Match wildcards; a matching tool is never
	// offered, whatever AllowedTools says.
	DeniedTools []string
}

// Conn is a connected server and the tools it offers. When the server
// says its tool list changed (notifications/tools/list_changed), Refresh
// lists the tools again.
type Conn struct {
	server  Server
	timeout time.Duration
	limit   int64 // MaxResponseBytes, lowered in tests
	session *sdk.ClientSession
	stdio   *processPipe // a stdio server's pipe; nil for a remote server

	mu       sync.Mutex
	tools    []tool.Registered
	warnings []string
	// notified counts the server's list_changed notifications; listed is
	// the count the current tools were listed after.
	notified, listed uint64

	// listen is a remote server's notification session (listen.go).
	listen *listener
	// sse: the server speaks the 2024-11-05 HTTP+SSE transport; its one
	// event stream carries notifications (and its end ends the session).
	// endStream ends that stream.
	sse       bool
	endStream context.CancelFunc
}

// Connect opens a session with s over streamable HTTP, lists its tools
// (following pagination) and keeps the allowed ones. It fails when the
// wildcards are not valid path.Match patterns or the server cannot be
// reached within the timeout. Tools that cannot be offered (a name clash
// after sanitizing, a schema the loop's validator rejects) are left out and
// named in Warnings. A remote server that cannot be reached yet (nothing
// listens at its address, its name does not resolve) is tried again until
// the timeout: one created or restarted a moment ago is not lost to the
// session. The server's notifications/tools/list_changed come on
// a stdio server's stream, and for a remote server on a second session kept
// for them alone (listen.go), so that a stream a proxy cuts never breaks
// tool calls. No message of the server larger than MaxResponseBytes is
// read: it fails its call (or connecting).
func Connect(ctx context.Context, s Server) (*Conn, error) {
	return connect(ctx, s, MaxResponseBytes)
}

// connect is Connect with limit in place of MaxResponseBytes.
func connect(ctx context.Context, s Server, limit int64) (*Conn, error) {
	if err := validPatterns(s.AllowedTools, s.DeniedTools); err != nil {
		return nil, fmt.Errorf("mcp server %s: %w", s.Name, err)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c := &Conn{server: s, timeout: timeout, limit: limit}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A stdio server's notifications come on its stream, as do those of a
	// server reached over the 2024 HTTP+SSE transport.
	client := sdk.NewClient(clientImpl, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.noteListChanged() },
	})
	httpClient := &http.Client{Transport: headerTransport{
		headers: s.Headers,
		base:    limitTransport{server: s.Name, limit: limit, base: guardedTransport()},
	}}
	var transport sdk.Transport = &sdk.StreamableClientTransport{
		Endpoint:   s.URL,
		HTTPClient: httpClient,
		// Calls and listings never depend on a long-lived stream: a broken
		// one fails the SDK's whole connection. Notifications come on a
		// session of their own (listen.go).
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
		MaxEventSize:         int(limit),
	}
	where := "at " + s.URL
	if s.Start != nil {
		where = "(command " + commandLine(s.Command) + ")"
		rwc, err := s.Start(ctx)
		if err != nil {
			return nil, fmt.Errorf("start mcp server %s %s: %w", s.Name, where, describe(ctx, err, timeout))
		}
		c.stdio = &processPipe{rwc: rwc}
		transport = &sdk.IOTransport{Reader: c.stdio, Writer: c.stdio, MaxLineLength: int(limit)}
	}
	var session *sdk.ClientSession
	var err error
	if c.stdio != nil {
		session, err = client.Connect(ctx, transport, nil)
	} else {
		session, err = c.connectRemote(ctx, parent, client, transport, httpClient)
	}
	if err != nil {
		if c.stdio != nil {
			_ = c.stdio.Close()
			err = c.stdio.explain(err)
		}
		return nil, fmt.Errorf("connect to mcp server %s %s: %w", s.Name, where, describe(ctx, err, timeout))
	}
	c.session = session
	if c.stdio == nil && !c.sse {
		c.listen = startListener(ctx, c, httpClient) // before listing: no change is missed
	}
	if _, err := c.list(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Pauses between connection attempts to a remote server that cannot be
// reached yet (connectRemote).
const (
	connectRetryMin = 100 * time.Millisecond
	connectRetryMax = 2 * time.Second
)

// connectRemote opens a session with the remote server of c over transport
// (streamable HTTP), or over the 2024-11-05 HTTP+SSE transport when the
// server refuses the streamable POST. While the server cannot be reached
// (unreachable: nothing listens yet, its name does not resolve yet, as when
// it was created a moment ago or is restarting), it tries again with a
// growing pause until ctx, bounded by the server's timeout, ends: the
// timeout bounds connecting, not one attempt. parent is the caller's
// context, on which an HTTP+SSE event stream lives.
func (c *Conn) connectRemote(ctx, parent context.Context, client *sdk.Client, transport sdk.Transport, httpClient *http.Client) (*sdk.ClientSession, error) {
	var unreachableErr error
	attempts := 0
	for delay := connectRetryMin; ; delay = min(2*delay, connectRetryMax) {
		attempts++
		session, err := c.connectRemoteOnce(ctx, parent, client, transport, httpClient)
		switch {
		case err == nil:
			return session, nil
		case ctx.Err() != nil && unreachableErr != nil:
			// The attempt the timeout cut says less than the ones before it.
			return nil, fmt.Errorf("%w (not reachable in %d attempts)", unreachableErr, attempts-1)
		case !unreachable(err) || ctx.Err() != nil:
			return nil, err
		}
		unreachableErr = err
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (not reachable in %d attempts)", unreachableErr, attempts)
		case <-t.C:
		}
	}
}

// connectRemoteOnce makes one attempt of connectRemote.
func (c *Conn) connectRemoteOnce(ctx, parent context.Context, client *sdk.Client, transport sdk.Transport, httpClient *http.Client) (*sdk.ClientSession, error) {
	session, err := client.Connect(ctx, transport, nil)
	if err == nil || ctx.Err() != nil {
		return session, err
	}
	// The MCP spec's backwards compatibility: a server of the 2024-11-05
	// HTTP+SSE transport refuses the streamable POST; try it that way. Its
	// event stream lives on the context it is opened with: the caller's,
	// cut by Close, not the connect timeout's.
	streamCtx, endStream := context.WithCancel(parent)
	connecting := context.AfterFunc(ctx, endStream) // the timeout still bounds connecting
	old, oldErr := client.Connect(streamCtx, &sdk.SSEClientTransport{Endpoint: c.server.URL, HTTPClient: httpClient, MaxEventSize: int(c.limit)}, nil)
	if connecting() && oldErr == nil {
		c.sse, c.endStream = true, endStream
		return old, nil
	}
	endStream()
	if oldErr == nil {
		_ = old.Close()
		oldErr = ctx.Err()
	}
	return nil, fmt.Errorf("%w (nor as an HTTP+SSE server: %v)", err, oldErr)
}

// unreachable reports whether err says nothing answered at the server's
// address (yet): a refused or reset connection, no route, or a name that
// does not resolve. The manager's own refusal of an address (dial.go) is
// none of these.
func unreachable(err error) bool {
	var dnsErr *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		(errors.As(err, &dnsErr) && (dnsErr.IsNotFound || dnsErr.IsTemporary || dnsErr.IsTimeout))
}

var clientImpl = &sdk.Implementation{Name: "agent-operator", Version: "v1alpha1"}

// noteListChanged records a notifications/tools/list_changed.
func (c *Conn) noteListChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notified++
}

// list lists the server's tools (following pagination) under ctx and makes
// the allowed ones the Conn's tools. It reports whether they differ from
// the tools before. A notification that arrives while listing makes the
// next Refresh list again.
func (c *Conn) list(ctx context.Context) (changed bool, err error) {
	c.mu.Lock()
	gen := c.notified
	c.mu.Unlock()
	var listed []*sdk.Tool
	cut := false
	for t, err := range c.session.Tools(ctx, nil) {
		if err != nil {
			if c.stdio != nil {
				err = c.stdio.explain(err)
			}
			return false, fmt.Errorf("list tools of mcp server %s: %w", c.server.Name, describe(ctx, err, c.timeout))
		}
		if len(listed) == MaxListedTools {
			cut = true // no further page is asked for
			break
		}
		listed = append(listed, t)
	}
	tools, warnings := c.offer(listed)
	if cut {
		warnings = append(warnings, fmt.Sprintf("mcp server %s offers more than %d tools: only its first %d are used", c.server.Name, MaxListedTools, MaxListedTools))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed = !sameTools(c.tools, tools)
	c.tools, c.warnings, c.listed = tools, warnings, gen
	return changed, nil
}

// Refresh lists the server's tools again when it sent
// notifications/tools/list_changed since they were last listed, with the
// same wildcards, schema checks and warnings as Connect, under the server's
// timeout. It returns the tools to offer now and whether they changed (in
// name, description or schema). Without a notification it returns at once
// and sends nothing. A listing that fails keeps the tools as they were and
// consumes the notification (the next one lists again), so a server that
// went away costs one timeout, not one per turn.
func (c *Conn) Refresh(ctx context.Context) (tools []tool.Registered, changed bool, err error) {
	c.mu.Lock()
	stale := c.notified != c.listed
	if !stale {
		tools = slices.Clone(c.tools)
	} else {
		c.listed = c.notified
	}
	c.mu.Unlock()
	if !stale {
		return tools, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	changed, err = c.list(ctx)
	return c.Tools(), changed, err
}

// Stale reports whether the server said its tools changed since they were
// last listed (the next Refresh lists them again).
func (c *Conn) Stale() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notified != c.listed
}

// sameTools reports whether a and b offer the same definitions in the same
// order.
func sameTools(a, b []tool.Registered) bool {
	return slices.EqualFunc(a, b, func(x, y tool.Registered) bool {
		return x.Definition.Name == y.Definition.Name && x.Definition.Description == y.Definition.Description &&
			bytes.Equal(x.Definition.Parameters, y.Definition.Parameters)
	})
}

// offer returns the allowed tools of listed that the loop can register, and
// warnings naming the allowed tools left out.
func (c *Conn) offer(listed []*sdk.Tool) (tools []tool.Registered, warnings []string) {
	check := tool.NewRegistry() // the loop's own validator, to skip bad schemas here
	seen := map[string]string{}
	for _, t := range listed {
		if !Allowed(t.Name, c.server.AllowedTools, c.server.DeniedTools) {
			continue
		}
		name := ToolName(c.server.Name, t.Name)
		if other, dup := seen[name]; dup {
			warnings = append(warnings, fmt.Sprintf("mcp server %s: tool %q is left out: its name %s is already used by tool %q", c.server.Name, t.Name, name, other))
			continue
		}
		params, err := json.Marshal(t.InputSchema)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("mcp server %s: tool %q is left out: encode its input schema: %v", c.server.Name, t.Name, err))
			continue
		}
		reg := tool.Registered{
			Definition: tool.Definition{Name: name, Description: describeTool(c.server.Name, t), Parameters: params},
			Executor:   c.call(t.Name),
		}
		if err := check.Register(reg); err != nil {
			warnings = append(warnings, fmt.Sprintf("mcp server %s: tool %q is left out: %v", c.server.Name, t.Name, err))
			continue
		}
		seen[name] = t.Name
		tools = append(tools, reg)
	}
	return tools, warnings
}

// Name returns the server's name.
func (c *Conn) Name() string { return c.server.Name }

// Tools returns the tools to offer to the loop, in the server's order, as
// of the last listing.
func (c *Conn) Tools() []tool.Registered {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tools)
}

// Warnings name the allowed tools that were left out, and why, as of the
// last listing.
func (c *Conn) Warnings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.warnings)
}

// Close ends the session with the server.
func (c *Conn) Close() error {
	if c.listen != nil {
		c.listen.stop()
	}
	err := c.session.Close()
	if c.endStream != nil {
		c.endStream()
	}
	if err != nil {
		return fmt.Errorf("close mcp server %s: %w", c.server.Name, err)
	}
	return nil
}

// call returns the executor of the server's tool called name: tools/call
// under the server's timeout. The server's own error results (isError) are
// error results; a call that cannot be made or is not answered in time is
// an error the loop reports to the model.
func (c *Conn) call(name string) tool.Executor {
	return func(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
		args := inv.Arguments
		if len(strings.TrimSpace(string(args))) == 0 {
			args = json.RawMessage("{}")
		}
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		res, err := c.session.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			if c.stdio != nil {
				err = c.stdio.explain(err)
			}
			return tool.Result{}, fmt.Errorf("mcp server %s, tool %s: %w", c.server.Name, name, describe(ctx, err, c.timeout))
		}
		return tool.Result{Output: resultText(res), IsError: res.IsError}, nil
	}
}

// describe says "no answer within <timeout>" for errors of an expired ctx.
func describe(ctx context.Context, err error, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (the server's timeout): %w", timeout, err)
	}
	return err
}

// resultText is the text of a tools/call result: the text blocks in order,
// a one-line note for each other block, and the structured content when
// there is no text at all.
func resultText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *sdk.EmbeddedResource:
			if r := c.Resource; r != nil && r.Text != "" {
				parts = append(parts, r.Text)
			} else if r != nil {
				parts = append(parts, fmt.Sprintf("[resource %s, not shown]", r.URI))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func describeTool(server string, t *sdk.Tool) string {
	d := t.Description
	if d == "" {
		d = t.Title
	}
	if d == "" {
		return fmt.Sprintf("Tool %s of the MCP server %s.", t.Name, server)
	}
	return d
}

// ToolName is the name the model sees for tool of server:
// mcp__<server>__<tool>, with every character outside [a-zA-Z0-9_-]
// replaced by '_'. A name longer than MaxToolNameLen is cut and ends with
// '_' and 8 hex digits of the SHA-256 of the full name, so cut names of
// different tools still differ.
func ToolName(server, name string) string {
	full := Prefix + sanitize(server) + "__" + sanitize(name)
	if len(full) <= MaxToolNameLen {
		return full
	}
	sum := sha256.Sum256([]byte(Prefix + server + "__" + name))
	return full[:MaxToolNameLen-9] + "_" + hex.EncodeToString(sum[:4])
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// Allowed reports whether the server's tool called name is offered: it
// matches no denied pattern, and some allowed pattern when there are any.
// Invalid patterns match nothing (Connect rejects them first).
func Allowed(name string, allowed, denied []string) bool {
	for _, p := range denied {
		if ok, _ := path.Match(p, name); ok {
			return false
		}
	}
	if len(allowed) == 0 {
		return true
	}
	for _, p := range allowed {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func validPatterns(lists ...[]string) error {
	for _, l := range lists {
		for _, p := range l {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("tool wildcard %q: %w", p, err)
			}
		}
	}
	return nil
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(req)
}

// Result of ConnectAll for one server.
type Result struct {
	Server string
	Conn   *Conn // nil when Err is set
	Err    error
}

// ConnectAll connects to every server at once and returns one Result per
// server, in the order of servers.
func ConnectAll(ctx context.Context, servers []Server) []Result {
	results := make([]Result, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			c, err := Connect(ctx, s)
			results[i] = Result{Server: s.Name, Conn: c, Err: err}
		})
	}
	wg.Wait()
	return results
}
