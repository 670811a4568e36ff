package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
	"github.com/agent-operator/agent-operator/internal/proctest"
	"github.com/agent-operator/agent-operator/internal/testenv"
)

func TestMCPHeadersOptIn(t *testing.T) {
	optedIn := map[string]string{LabelMCPHeaders: "true"}
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		url         string
		wantErr     string
	}{
		{name: "no label", url: "http://mcp.example/mcp", wantErr: "not opted in"},
		{name: "llm label is not enough", labels: map[string]string{LabelLLMCredentials: "true"}, url: "http://mcp.example/mcp", wantErr: "not opted in"},
		{name: "labelled, any url", labels: optedIn, url: "http://mcp.example/mcp"},
		{name: "allowed url", labels: optedIn, annotations: map[string]string{AnnotationAllowedBaseURLs: "https://a.example, http://mcp.example/mcp"}, url: "http://mcp.example/mcp"},
		{name: "other host", labels: optedIn, annotations: map[string]string{AnnotationAllowedBaseURLs: "http://mcp.example"},
			url: "http://evil.example/mcp?token=x", wantErr: "may not be sent to http://evil.example/mcp:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: tt.labels, Annotations: tt.annotations}}
			err := mcpHeadersOptIn(sec, tt.url)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestConnectMCP: the headers of an opted-in Secret read from a real API
// server reach the MCP server; an unreachable server is left out with a
// warning that names it and carries no header value; a Secret not opted in
// is a configuration error.
func TestConnectMCP(t *testing.T) {
	env, cfg, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	api, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mcp-auth", Labels: map[string]string{LabelMCPHeaders: "true"}},
			Data: map[string][]byte{"Authorization": []byte("Bearer s3cret")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain"},
			Data: map[string][]byte{"Authorization": []byte("Bearer other")}},
	} {
		if err := api.Create(t.Context(), sec); err != nil {
			t.Fatal(err)
		}
	}
	up := mcptest.New(t, 0)
	down := mcptest.New(t, 0)
	down.Close()
	timeout := &metav1.Duration{Duration: 5 * time.Second}
	newSess := func(servers ...agentsv1.MCPServer) *session {
		obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}
		obj.Spec.Tools.MCPServers = servers
		return &session{r: &Runner{opts: Options{Reader: api}}, obj: obj, log: logr.Discard()}
	}

	s := newSess(
		agentsv1.MCPServer{Name: "demo", URL: up.URL, Timeout: timeout, AllowedTools: []string{"echo"},
			HeadersSecretRef: &agentsv1.MCPHeadersSecretRef{Name: "mcp-auth"}},
		agentsv1.MCPServer{Name: "gone", URL: down.URL, Timeout: &metav1.Duration{Duration: time.Second}, // tried until then
			HeadersSecretRef: &agentsv1.MCPHeadersSecretRef{Name: "mcp-auth"}},
	)
	sources, warnings, closeAll, err := s.connectMCP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	tools := sourceTools(sources)
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Definition.Name)
	}
	if !slices.Equal(names, []string{"mcp__demo__echo"}) {
		t.Errorf("tools = %v", names)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "MCP server gone is not reachable") || strings.Contains(warnings[0], "s3cret") {
		t.Errorf("warnings = %q", warnings)
	}
	// Progress (status.mcpServers) says which servers connected and how many tools each gave.
	states := s.snapshot().MCPServers
	if len(states) != 2 || states[0] != (agentsv1.MCPServerStatus{Name: "demo", Connected: true, Tools: 1}) ||
		states[1].Name != "gone" || states[1].Connected || states[1].Message == "" || strings.Contains(states[1].Message, "s3cret") {
		t.Errorf("progress MCPServers = %+v", states)
	}
	hs := up.Headers()
	if len(hs) == 0 {
		t.Fatal("the server got no request")
	}
	for i, h := range hs {
		if h.Get("Authorization") != "Bearer s3cret" {
			t.Fatalf("request %d: Authorization = %q", i, h.Get("Authorization"))
		}
	}

	s = newSess(agentsv1.MCPServer{Name: "demo", URL: up.URL, HeadersSecretRef: &agentsv1.MCPHeadersSecretRef{Name: "plain"}})
	before := len(up.Headers())
	if _, _, _, err := s.connectMCP(t.Context()); err == nil || !strings.Contains(err.Error(), "not opted in") {
		t.Fatalf("err = %v, want a configuration error saying the Secret is not opted in", err)
	}
	if len(up.Headers()) != before {
		t.Error("a request was sent with a Secret that is not opted in")
	}
}

// TestConnectMCPStdio: a stdio server (test/mcpserver -stdio) started in the
// session's environment offers its tools like a remote one, with its env and
// working directory; a command that cannot start is left out with a warning
// and a status entry naming it; an environment without stdio support says so.
func TestConnectMCPStdio(t *testing.T) {
	bin, cleanup, err := proctest.Build("github.com/agent-operator/agent-operator/test/mcpserver", "mcpserver")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	local, err := localenv.New(root, localenv.WithKillGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	newSess := func(env tool.ExecutionEnvironment, servers ...agentsv1.MCPServer) *session {
		obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}
		obj.Spec.Tools.MCPServers = servers
		return &session{r: &Runner{}, obj: obj, log: logr.Discard(), env: env}
	}
	s := newSess(guardOwner(local, func(error) {}),
		agentsv1.MCPServer{Name: "ws", Command: []string{"sh", "-c", `test "$(basename "$(pwd)")" = sub && test "$GREETING" = hi && exec "$0" -stdio`, bin},
			Env: []agentsv1.MCPEnvVar{{Name: "GREETING", Value: "hi"}}, WorkingDir: "sub", DeniedTools: []string{"crash", "slow"}},
		agentsv1.MCPServer{Name: "broken", Command: []string{"/no/such/mcp-server"}},
	)
	sources, warnings, closeAll, err := s.connectMCP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	tools := sourceTools(sources)
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Definition.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"mcp__ws__echo", "mcp__ws__fail", "mcp__ws__get_weather"}) {
		t.Errorf("tools = %v", names)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "MCP server broken did not start in the workspace") ||
		!strings.Contains(warnings[0], "/no/such/mcp-server") {
		t.Errorf("warnings = %q", warnings)
	}
	states := s.snapshot().MCPServers
	if len(states) != 2 || states[0] != (agentsv1.MCPServerStatus{Name: "ws", Connected: true, Tools: 3}) ||
		states[1].Name != "broken" || states[1].Connected || !strings.Contains(states[1].Message, "/no/such/mcp-server") {
		t.Errorf("progress MCPServers = %+v", states)
	}
	for _, tl := range tools {
		if tl.Definition.Name != "mcp__ws__echo" {
			continue
		}
		res, err := tl.Executor(t.Context(), &tool.Invocation{Name: tl.Definition.Name, Arguments: []byte(`{"text":"from the workspace"}`)})
		if err != nil || res.Output != "echo: from the workspace" {
			t.Errorf("echo = %+v, %v", res, err)
		}
	}

	// An environment that cannot run processes.
	s = newSess(guardOwner(plainEnv{local}, func(error) {}), agentsv1.MCPServer{Name: "ws", Command: []string{bin, "-stdio"}})
	_, warnings, closeAll2, err := s.connectMCP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll2()
	if len(warnings) != 1 || !strings.Contains(warnings[0], "cannot run stdio MCP servers") {
		t.Errorf("warnings = %q", warnings)
	}
}

// plainEnv hides every optional method of its environment.
type plainEnv struct{ tool.ExecutionEnvironment }

// sourceTools are the tools of every source, in order.
func sourceTools(sources []*mcpSource) []tool.Registered {
	var out []tool.Registered
	for _, src := range sources {
		out = append(out, src.Tools()...)
	}
	return out
}

// TestMCPRefreshUpdatesStatus: when a server's tools change
// (notifications/tools/list_changed), the refresh the loop makes between
// turns updates the server's status.mcpServers entry and asks for a status
// write; without a change it does neither.
func TestMCPRefreshUpdatesStatus(t *testing.T) {
	up := mcptest.New(t, 0, mcptest.WithToolChanges())
	obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}
	obj.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "demo", URL: up.URL, Timeout: &metav1.Duration{Duration: 5 * time.Second},
		DeniedTools: []string{"slow"}}}
	var notified atomic.Int32
	s := &session{r: &Runner{opts: Options{Now: time.Now, Notify: func(types.NamespacedName) { notified.Add(1) }}}, obj: obj, log: logr.Discard()}
	sources, _, closeAll, err := s.connectMCP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if len(sources) != 1 || sources[0].Name() != "MCP server demo" {
		t.Fatalf("sources = %v", sources)
	}
	src := sources[0]
	count := func() int32 { return s.snapshot().MCPServers[0].Tools }
	before := count()
	if _, changed, err := src.Refresh(t.Context()); changed || err != nil || notified.Load() != 0 {
		t.Fatalf("refresh without a notification: changed=%v err=%v status writes=%d", changed, err, notified.Load())
	}
	for _, tl := range src.Tools() {
		if tl.Definition.Name == "mcp__demo__"+mcptest.AddTool {
			if _, err := tl.Executor(t.Context(), &tool.Invocation{Arguments: []byte(`{"name":"added"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !src.conn.Stale() {
		if time.Now().After(deadline) {
			t.Fatal("no list_changed reached the connection")
		}
		time.Sleep(5 * time.Millisecond) // polling the condition
	}
	tools, changed, err := src.Refresh(t.Context())
	if err != nil || !changed || len(tools) != int(before)+1 {
		t.Fatalf("refresh after a notification: %d tools (had %d), changed=%v, err=%v", len(tools), before, changed, err)
	}
	if got := count(); got != before+1 || notified.Load() != 1 {
		t.Errorf("status tools = %d (want %d), status writes = %d (want 1)", got, before+1, notified.Load())
	}
}
