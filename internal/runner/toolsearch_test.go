package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
	"github.com/agent-operator/agent-operator/internal/looptest"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
)

func TestToolSearchConfig(t *testing.T) {
	cases := []struct {
		name  string
		tools agentsv1.ToolsSpec
		want  loop.ToolSearchConfig
	}{
		{"unset: the loop's defaults", agentsv1.ToolsSpec{}, loop.ToolSearchConfig{}},
		{"thresholds", agentsv1.ToolsSpec{ToolSearch: &agentsv1.ToolSearchSpec{Threshold: ptr.To[int32](10), ThresholdBytes: ptr.To[int32](4096)}},
			loop.ToolSearchConfig{Threshold: 10, ThresholdBytes: 4096}},
		{"disabled", agentsv1.ToolsSpec{ToolSearch: &agentsv1.ToolSearchSpec{Disabled: true}}, loop.ToolSearchConfig{Disabled: true}},
		{"tool_search among the disabled tools", agentsv1.ToolsSpec{DisabledTools: []string{"shell", loop.ToolSearchToolName}},
			loop.ToolSearchConfig{Disabled: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := toolSearchConfig(&agentsv1.AgentSessionSpec{Tools: tc.tools}); got != tc.want {
				t.Errorf("config = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestToolSearchOverMCP: the tools of a real MCP server, deferred by
// spec.tools.toolSearch.threshold, are found with tool_search and called on
// the next turn.
func TestToolSearchOverMCP(t *testing.T) {
	up := mcptest.New(t, 0)
	obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}
	obj.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "demo", URL: up.URL, Timeout: &metav1.Duration{Duration: 5 * time.Second}}}
	obj.Spec.Tools.ToolSearch = &agentsv1.ToolSearchSpec{Threshold: ptr.To[int32](1)}
	s := &session{r: &Runner{}, obj: obj, log: logr.Discard()}
	sources, _, closeAll, err := s.connectMCP(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	tools := sourceTools(sources)
	if len(tools) < 2 {
		t.Fatalf("the server offered %d tools, want more than the threshold of 1", len(tools))
	}
	env, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Close() }()
	echo := "mcp__demo__" + mcptest.Echo
	sc := looptest.Script(
		looptest.Tools(looptest.Call(loop.ToolSearchToolName, map[string]string{"query": "echoes text"})),
		scripted.Turn{Expect: looptest.ExpectResult(`"name":"` + echo + `"`),
			ToolCalls: []scripted.ToolCall{looptest.Call(echo, map[string]string{"text": "hi"})}},
		scripted.Turn{Expect: looptest.ExpectResult("echo: hi"), Text: "done"},
	)
	p := profile.Anthropic("claude-sonnet-4-5")
	sess, err := loop.New(p, env, scripted.New(sc, p.Model()), append(mcpSourceOptions(sources), loop.WithToolSearch(toolSearchConfig(&obj.Spec)))...)
	if err != nil {
		t.Fatal(err)
	}
	rec := looptest.Record(sess)
	if err := sess.Submit(t.Context(), "echo hi"); err != nil {
		t.Fatal(err) // a turn's Expect failing fails the model call
	}
	_ = sess.Close()
	rec.All(t)
	deferred, loaded := sess.DeferredTools()
	if len(deferred) != len(tools) || strings.Join(loaded, ",") != echo {
		t.Errorf("deferred %v, loaded %v; want all %d deferred and %s loaded", deferred, loaded, len(tools), echo)
	}
}
