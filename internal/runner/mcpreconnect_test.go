package runner

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

// TestMCPServerDownAtStartJoinsLater: a remote MCP server that does not
// answer when the session starts (down for longer than its connect timeout)
// is offered without tools, with a warning and a status entry saying so;
// once it answers, the background retry connects it, its status entry says
// connected, and the loop's next refresh offers its tools (once). Another
// server that never answers keeps being retried until closeAll, which ends
// the retries. On the old code the server's tools never joined the session.
func TestMCPServerDownAtStartJoinsLater(t *testing.T) {
	minBefore := reconnectMin
	reconnectMin = 20 * time.Millisecond
	t.Cleanup(func() { reconnectMin = minBefore })
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	lateAddr, neverAddr := free(), free()
	timeout := &metav1.Duration{Duration: 200 * time.Millisecond}
	obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}
	obj.Spec.Tools.MCPServers = []agentsv1.MCPServer{
		{Name: "late", URL: "http://" + lateAddr + "/mcp", Timeout: timeout, AllowedTools: []string{"echo"}},
		{Name: "never", URL: "http://" + neverAddr + "/mcp", Timeout: timeout},
	}
	var notified atomic.Int32
	s := &session{r: &Runner{opts: Options{Now: time.Now, Notify: func(types.NamespacedName) { notified.Add(1) }}}, obj: obj, log: logr.Discard()}
	sources, warnings, closeAll, err := s.connectMCP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			closeAll()
		}
	}()
	if len(sources) != 2 || len(sourceTools(sources)) != 0 {
		t.Fatalf("%d sources offering %d tools, want 2 offering none", len(sources), len(sourceTools(sources)))
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "MCP server late is not reachable") || !strings.Contains(warnings[0], "tries it again") {
		t.Errorf("warnings = %q", warnings)
	}
	if st := s.snapshot().MCPServers; len(st) != 2 || st[0].Connected || st[0].Message == "" {
		t.Errorf("status before the server answers = %+v", st)
	}
	late := sources[0]
	if tools, changed, err := late.Refresh(t.Context()); len(tools) != 0 || changed || err != nil {
		t.Fatalf("refresh while down: %d tools, changed=%v, err=%v", len(tools), changed, err)
	}

	mcptest.New(t, 0, mcptest.WithAddress(lateAddr))
	deadline := time.Now().Add(30 * time.Second)
	for late.connected() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the server that came up was not connected")
		}
		time.Sleep(10 * time.Millisecond) // polling the condition
	}
	if st := s.snapshot().MCPServers[0]; st != (agentsv1.MCPServerStatus{Name: "late", Connected: true, Tools: 1}) {
		t.Errorf("status once connected = %+v", st)
	}
	if notified.Load() == 0 {
		t.Error("connecting asked for no status write")
	}
	tools, changed, err := late.Refresh(t.Context())
	if err != nil || !changed || len(tools) != 1 || tools[0].Definition.Name != "mcp__late__echo" {
		t.Fatalf("refresh once connected: tools=%v changed=%v err=%v", sourceTools(sources[:1]), changed, err)
	}
	if _, changed, err := late.Refresh(t.Context()); changed || err != nil {
		t.Fatalf("second refresh: changed=%v err=%v, want no change", changed, err)
	}
	if sources[1].connected() != nil {
		t.Fatal("a server nothing listens for is connected")
	}
	closeAll() // returns only once every retry has ended
	closed = true
}
