package runner

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp"
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
	if !ok || allowedURL(serverURL, allowed) {
		return nil
	}
	return fmt.Errorf("secret %s may not be sent to %s: its annotation %s allows only %q; no request was sent",
		sec.Name, redactURL(serverURL), AnnotationAllowedBaseURLs, allowed)
}

// connectMCP connects the session's MCP servers at once and returns each
// connected one as a tool source for the loop (loop.WithExtraToolSource),
// which lists its tools again between turns after the server's
// notifications/tools/list_changed. A server that cannot be reached is left
// out: the session runs without its tools, and warnings (emitted as WARNING
// events, which the model does not see) say so, as they name tools left
// out. closeAll ends every connection.
func (s *session) connectMCP(ctx context.Context) (sources []*mcpSource, warnings []string, closeAll func(), err error) {
	servers, err := mcpServers(ctx, s.r.opts.Reader, s.obj, s.env)
	if err != nil || len(servers) == 0 {
		return nil, nil, func() {}, err
	}
	var states []agentsv1.MCPServerStatus
	for i, res := range mcp.ConnectAll(ctx, servers) {
		if res.Err != nil {
			s.log.Info("MCP server not reachable; the session runs without its tools", "server", res.Server, "reason", res.Err.Error())
			what := "is not reachable"
			if servers[i].Start != nil {
				what = "did not start in the workspace"
			}
			warnings = append(warnings, fmt.Sprintf("MCP server %s %s; its tools are not available: %v", res.Server, what, res.Err))
			states = append(states, agentsv1.MCPServerStatus{Name: res.Server, Message: cut(res.Err.Error(), 1024)})
			continue
		}
		tools := res.Conn.Tools()
		s.log.Info("Connected MCP server", "server", res.Server, "tools", len(tools))
		sources = append(sources, &mcpSource{s: s, conn: res.Conn, status: len(states)})
		warnings = append(warnings, res.Conn.Warnings()...)
		states = append(states, agentsv1.MCPServerStatus{Name: res.Server, Connected: true, Tools: int32(len(tools)),
			Message: cut(strings.Join(res.Conn.Warnings(), "; "), 1024)})
	}
	s.mu.Lock()
	s.prog.MCPServers = states
	s.mu.Unlock()
	return sources, warnings, func() {
		for _, src := range sources {
			if err := src.conn.Close(); err != nil {
				s.log.Info("Closing an MCP connection failed", "server", src.conn.Name(), "reason", err.Error())
			}
		}
	}, nil
}

// mcpSource is a connected MCP server as a tool source of the loop: when a
// refresh changes its tools, its entry of status.mcpServers says how many
// it offers now and which were left out.
type mcpSource struct {
	s      *session
	conn   *mcp.Conn
	status int // index in s.prog.MCPServers
}

// Name is how the loop's events name the server.
func (m *mcpSource) Name() string { return "MCP server " + m.conn.Name() }

// Tools returns the server's tools as listed last.
func (m *mcpSource) Tools() []tool.Registered { return m.conn.Tools() }

// Refresh lists the server's tools again if it said they changed
// (mcp.Conn.Refresh) and updates its status entry when they did.
func (m *mcpSource) Refresh(ctx context.Context) ([]tool.Registered, bool, error) {
	tools, changed, err := m.conn.Refresh(ctx)
	if err != nil {
		m.s.log.Info("Listing an MCP server's tools again failed; its tools stay as they were", "server", m.conn.Name(), "reason", err.Error())
	}
	if err != nil || !changed {
		return tools, changed, err
	}
	m.s.log.Info("MCP server's tools changed", "server", m.conn.Name(), "tools", len(tools))
	m.s.mu.Lock()
	if m.status < len(m.s.prog.MCPServers) && m.s.prog.MCPServers[m.status].Name == m.conn.Name() {
		st := &m.s.prog.MCPServers[m.status]
		st.Tools = int32(len(tools))
		st.Message = cut(strings.Join(m.conn.Warnings(), "; "), 1024)
	}
	m.s.mu.Unlock()
	m.s.notify(false)
	return tools, true, nil
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

// allowedURL reports whether target is under one of the comma- or
// space-separated URLs of list (as for AnnotationAllowedBaseURLs).
func allowedURL(target, list string) bool {
	for _, a := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		if urlUnder(target, a) {
			return true
		}
	}
	return false
}
