package runner

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp"
	"github.com/agent-operator/agent-operator/internal/urlscope"
)

// LabelMCPHeaders opts a Secret in as the HTTP headers of MCP servers: only
// a Secret labelled agent-operator.dev/mcp-headers: "true" may be named by
// spec.tools.mcpServers[].headersSecretRef, so that whoever may create
// AgentSessions cannot make the manager send any Secret to any URL. The
// Secret's optional AnnotationAllowedBaseURLs limits the server URLs.
const LabelMCPHeaders = "agent-operator.dev/mcp-headers"

// mcpServers reads the headers Secrets of spec.tools.mcpServers. A missing
// Secret, or one not opted in, is a configuration error. Stdio servers are
// started in env.
func mcpServers(ctx context.Context, reader client.Reader, s *agentsv1.AgentSession, env tool.ExecutionEnvironment) ([]mcp.Server, error) {
	var servers []mcp.Server
	for _, ms := range s.Spec.Tools.MCPServers {
		srv := mcp.Server{Name: ms.Name, URL: ms.URL, Command: ms.Command, AllowedTools: ms.AllowedTools, DeniedTools: ms.DeniedTools}
		if len(ms.Command) > 0 {
			srv.Start = stdioStart(env, s, ms) // run in the workspace (stdio.go)
		}
		if ms.Timeout != nil {
			srv.Timeout = ms.Timeout.Duration
		}
		if ref := ms.HeadersSecretRef; ref != nil {
			var sec corev1.Secret
			if err := reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &sec); err != nil {
				return nil, fmt.Errorf("%w: get headers secret %s of mcp server %s: %w", ErrConfig, ref.Name, ms.Name, err)
			}
			if err := mcpHeadersOptIn(&sec, ms.URL); err != nil {
				return nil, fmt.Errorf("%w: mcp server %s: %w", ErrConfig, ms.Name, err)
			}
			srv.Headers = make(map[string]string, len(sec.Data))
			for k, v := range sec.Data {
				srv.Headers[k] = string(v)
			}
		}
		servers = append(servers, srv)
	}
	return servers, nil
}

// mcpHeadersOptIn returns why sec may not be sent to the MCP server at
// serverURL, or nil when it may.
func mcpHeadersOptIn(sec *corev1.Secret, serverURL string) error {
	if sec.Labels[LabelMCPHeaders] != "true" {
		return fmt.Errorf("secret %s is not opted in as MCP headers: the manager sends only Secrets labelled %s=true "+
			"(kubectl label secret %s %s=true); no request was sent", sec.Name, LabelMCPHeaders, sec.Name, LabelMCPHeaders)
	}
	allowed, ok := sec.Annotations[AnnotationAllowedBaseURLs]
	if !ok || urlscope.Allows(allowed, serverURL) {
		return nil
	}
	return fmt.Errorf("secret %s may not be sent to %s: its annotation %s allows only %q; no request was sent",
		sec.Name, redactURL(serverURL), AnnotationAllowedBaseURLs, allowed)
}

// connectMCP connects the session's MCP servers at once and returns each
// as a tool source for the loop (loop.WithExtraToolSource), which lists its
// tools again between turns after the server's
// notifications/tools/list_changed. A server that cannot be reached is
// offered without tools: warnings (emitted as WARNING events, which the
// model does not see) say so, as they name tools left out, and a remote
// server is tried again in the background until it answers (reconnect);
// its tools then join at the start of the next turn. closeAll ends every
// connection and every retry.
func (s *session) connectMCP(ctx context.Context) (sources []*mcpSource, warnings []string, closeAll func(), err error) {
	servers, err := mcpServers(ctx, s.reader(), s.obj, s.env)
	if err != nil || len(servers) == 0 {
		return nil, nil, func() {}, err
	}
	// Retries outlive ctx (the start of the runner): they end with closeAll.
	retryCtx, stopRetries := context.WithCancel(context.WithoutCancel(ctx))
	var retries sync.WaitGroup
	var states []agentsv1.MCPServerStatus
	for i, res := range mcp.ConnectAll(ctx, servers) {
		src := &mcpSource{s: s, name: res.Server, status: len(states)}
		sources = append(sources, src)
		if res.Err != nil {
			s.log.Info("MCP server not reachable; the session runs without its tools", "server", res.Server, "reason", res.Err.Error())
			what, then := "is not reachable", "; the session tries it again and offers its tools once it answers"
			if servers[i].Start != nil {
				what, then = "did not start in the workspace", ""
			}
			warnings = append(warnings, fmt.Sprintf("MCP server %s %s; its tools are not available%s: %v", res.Server, what, then, res.Err))
			states = append(states, agentsv1.MCPServerStatus{Name: res.Server, Message: cut(res.Err.Error(), 1024)})
			if servers[i].Start == nil {
				retries.Go(func() { src.reconnect(retryCtx, servers[i]) })
			}
			continue
		}
		tools := res.Conn.Tools()
		s.log.Info("Connected MCP server", "server", res.Server, "tools", len(tools))
		src.conn, src.offered = res.Conn, true // the loop registers Tools() at its start
		warnings = append(warnings, res.Conn.Warnings()...)
		states = append(states, agentsv1.MCPServerStatus{Name: res.Server, Connected: true, Tools: int32(len(tools)),
			Message: cut(strings.Join(res.Conn.Warnings(), "; "), 1024)})
	}
	s.mu.Lock()
	s.prog.MCPServers = states
	s.mu.Unlock()
	return sources, warnings, func() {
		stopRetries()
		retries.Wait()
		for _, src := range sources {
			if conn := src.connected(); conn != nil {
				if err := conn.Close(); err != nil {
					s.log.Info("Closing an MCP connection failed", "server", src.name, "reason", err.Error())
				}
			}
		}
	}, nil
}

// Pauses between background connection attempts to a remote MCP server
// that was not reachable when the session started (each attempt itself
// keeps trying for the server's timeout, mcp.Connect).
var (
	reconnectMin = 5 * time.Second
	reconnectMax = 2 * time.Minute
)

// mcpSource is an MCP server as a tool source of the loop: when a refresh
// changes its tools, or a server not reachable at the start connects, its
// entry of status.mcpServers says how many it offers now and which were
// left out.
type mcpSource struct {
	s      *session
	name   string // the server's name
	status int    // index in s.prog.MCPServers

	mu sync.Mutex
	// conn is nil until the server is connected (reconnect).
	conn *mcp.Conn
	// offered: conn's tools have been handed to the loop.
	offered bool
}

// connected returns the connection, or nil before there is one.
func (m *mcpSource) connected() *mcp.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conn
}

// reconnect tries to connect server, pausing from reconnectMin doubling up
// to reconnectMax between attempts, until it answers or ctx ends; the next
// Refresh offers its tools.
func (m *mcpSource) reconnect(ctx context.Context, server mcp.Server) {
	for delay := reconnectMin; ; delay = min(2*delay, reconnectMax) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		conn, err := mcp.Connect(ctx, server)
		if err != nil {
			m.s.log.V(1).Info("MCP server still not reachable", "server", server.Name, "retryIn", min(2*delay, reconnectMax), "reason", err.Error())
			continue
		}
		m.mu.Lock()
		m.conn = conn
		m.mu.Unlock()
		m.s.log.Info("Connected MCP server after it was not reachable", "server", server.Name, "tools", len(conn.Tools()))
		m.updateStatus(conn, conn.Tools(), true) // the loop takes the tools at its next turn
		return
	}
}

// Name is how the loop's events name the server.
func (m *mcpSource) Name() string { return "MCP server " + m.name }

// Tools returns the server's tools as listed last; none before it is
// connected.
func (m *mcpSource) Tools() []tool.Registered {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		return nil
	}
	m.offered = true
	return m.conn.Tools()
}

// Refresh offers the tools of a server that connected since the last turn,
// and otherwise lists the server's tools again if it said they changed
// (mcp.Conn.Refresh) and updates its status entry when they did.
func (m *mcpSource) Refresh(ctx context.Context) ([]tool.Registered, bool, error) {
	m.mu.Lock()
	conn, fresh := m.conn, m.conn != nil && !m.offered
	m.offered = conn != nil
	m.mu.Unlock()
	switch {
	case conn == nil:
		return nil, false, nil
	case fresh: // connected by reconnect, which updated the status
		return conn.Tools(), true, nil
	}
	tools, changed, err := conn.Refresh(ctx)
	if err != nil {
		m.s.log.Info("Listing an MCP server's tools again failed; its tools stay as they were", "server", m.name, "reason", err.Error())
	}
	if err != nil || !changed {
		return tools, changed, err
	}
	m.s.log.Info("MCP server's tools changed", "server", m.name, "tools", len(tools))
	m.updateStatus(conn, tools, false)
	return tools, true, nil
}

// updateStatus makes the server's status.mcpServers entry say it offers
// tools now (and is connected, when connected is set) and asks for a
// status write.
func (m *mcpSource) updateStatus(conn *mcp.Conn, tools []tool.Registered, connected bool) {
	m.s.mu.Lock()
	if m.status < len(m.s.prog.MCPServers) && m.s.prog.MCPServers[m.status].Name == m.name {
		st := &m.s.prog.MCPServers[m.status]
		if connected {
			st.Connected = true
		}
		st.Tools = int32(len(tools))
		st.Message = cut(strings.Join(conn.Warnings(), "; "), 1024)
	}
	m.s.mu.Unlock()
	m.s.notify(false)
}

// mcpSourceOptions offers each connected server's tools to the loop.
func mcpSourceOptions(sources []*mcpSource) []loop.Option {
	opts := make([]loop.Option, 0, len(sources))
	for _, src := range sources {
		opts = append(opts, loop.WithExtraToolSource(src.Name(), src))
	}
	return opts
}

// cut returns s cut to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// redactURL drops the user information and query of u (they may carry
// credentials).
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable url)"
	}
	p.User, p.RawQuery = nil, ""
	return p.String()
}
