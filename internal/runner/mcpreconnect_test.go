package runner

import (
	"context"
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

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

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
	lateAddr, neverAddr := freeAddr(t), freeAddr(t)
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

// TestMCPRetryHangingWhenTheRunnerEnds: the adversary's dependency that
// accepts connections and never answers. A server not reachable at the
// start later hangs the background retry's connect (its timeout is ten
// minutes); the runner's end (closeAll) still returns, ends the retry and
// leaves no connection open to the server.
func TestMCPRetryHangingWhenTheRunnerEnds(t *testing.T) {
	minBefore := reconnectMin
	reconnectMin = 20 * time.Millisecond
	t.Cleanup(func() { reconnectMin = minBefore })
	addr := freeAddr(t) // nothing listens at the start
	obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}
	obj.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "hang", URL: "http://" + addr + "/mcp",
		Timeout: &metav1.Duration{Duration: 10 * time.Minute}}}
	s := &session{r: &Runner{opts: Options{Now: time.Now, Notify: func(types.NamespacedName) {}}}, obj: obj, log: logr.Discard()}
	// The start's own attempts end at the server's timeout: cut them short,
	// as if the server had stayed unreachable that long.
	start, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	sources, _, closeAll, err := s.connectMCP(start)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if len(sources) != 1 || sources[0].connected() != nil {
		t.Fatalf("sources = %v, want one not connected", sources)
	}

	// Now something listens there, accepts and never answers.
	hang, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	first := <-accepted // a background attempt is in flight, waiting for an answer
	closeAll()          // returns only once the retry has ended
	if sources[0].connected() != nil {
		t.Fatal("a connection was made to a server that never answered")
	}
	// The client side of the hanging attempt was closed: reading it ends.
	buf := make([]byte, 64<<10)
	for {
		if _, err := first.Read(buf); err != nil {
			break // EOF or reset: nothing left open
		}
	}
	_ = first.Close()
}
