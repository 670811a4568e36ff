package agentsession

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

var nameSeq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

// validSession is a session the API server accepts; the tests break one thing at a time.
func validSession(ns string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("valid"), Namespace: ns},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Write hello.py",
			Model: agentsv1.ModelSpec{
				Provider:        agentsv1.ProviderAnthropic,
				Name:            "claude-sonnet-4-5",
				APIKeySecretRef: &agentsv1.SecretKeyRef{Name: "llm", Key: "anthropic"},
			},
		},
	}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestAPIServerRejectsInvalidSpecs(t *testing.T) {
	ns := "default"
	cases := []struct {
		name   string
		mutate func(*agentsv1.AgentSession)
		want   string
	}{
		{"unknown provider", func(s *agentsv1.AgentSession) { s.Spec.Model.Provider = "mistral" },
			`Unsupported value: "mistral": supported values: "anthropic", "openai", "openai-compatible", "gemini", "scripted"`},
		{"empty prompt", func(s *agentsv1.AgentSession) { s.Spec.Prompt = "  " },
			"spec.prompt must not be empty: describe the task for the agent"},
		{"negative maxTurns", func(s *agentsv1.AgentSession) { s.Spec.Limits.MaxTurns = -1 },
			"spec.limits.maxTurns: Invalid value: -1: spec.limits.maxTurns in body should be greater than or equal to 0"},
		{"negative token budget", func(s *agentsv1.AgentSession) { s.Spec.Limits.TokenBudget = -5 },
			"spec.limits.tokenBudget in body should be greater than or equal to 0"},
		{"zero command timeout", func(s *agentsv1.AgentSession) { s.Spec.Limits.DefaultCommandTimeout = dur(0) },
			"spec.limits.defaultCommandTimeout must be a positive duration such as 10s"},
		{"max timeout below default", func(s *agentsv1.AgentSession) {
			s.Spec.Limits.DefaultCommandTimeout = dur(time.Minute)
			s.Spec.Limits.MaxCommandTimeout = dur(30 * time.Second)
		}, "spec.limits.maxCommandTimeout must be at least spec.limits.defaultCommandTimeout"},
		{"real provider without key", func(s *agentsv1.AgentSession) { s.Spec.Model.APIKeySecretRef = nil },
			"spec.model.apiKeySecretRef is required for providers anthropic, openai and gemini"},
		{"scripted without script", func(s *agentsv1.AgentSession) {
			s.Spec.Model.Provider = agentsv1.ProviderScripted
			s.Spec.Model.APIKeySecretRef = nil
		}, "spec.model.scriptConfigMapRef is required when provider is scripted"},
		{"script on a real provider", func(s *agentsv1.AgentSession) {
			s.Spec.Model.ScriptConfigMapRef = &agentsv1.ConfigMapKeyRef{Name: "script"}
		}, "spec.model.scriptConfigMapRef is only allowed when provider is scripted"},
		{"openai-compatible without baseURL", func(s *agentsv1.AgentSession) {
			s.Spec.Model.Provider = agentsv1.ProviderOpenAICompatible
		}, "spec.model.baseURL is required when provider is openai-compatible"},
		{"baseURL not http", func(s *agentsv1.AgentSession) { s.Spec.Model.BaseURL = "ftp://example.com" },
			"spec.model.baseURL must be an http or https URL"},
		{"bad reasoning effort", func(s *agentsv1.AgentSession) { s.Spec.Model.ReasoningEffort = "max" },
			`spec.model.reasoningEffort: Unsupported value: "max"`},
		{"depth beyond maxDepth", func(s *agentsv1.AgentSession) {
			s.Spec.Depth = ptr.To[int32](2)
			s.Spec.ParentRef = &agentsv1.ParentReference{Name: "parent"}
		}, "spec.depth must not exceed spec.subagents.maxDepth (default 1)"},
		{"child without parentRef", func(s *agentsv1.AgentSession) { s.Spec.Depth = ptr.To[int32](1) },
			"spec.parentRef must be set exactly when spec.depth > 0"},
		{"both volumes", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Volume = agentsv1.WorkspaceVolume{
				EmptyDir:              &agentsv1.EmptyDirVolume{},
				PersistentVolumeClaim: &agentsv1.PVCVolume{ClaimName: "work"},
			}
		}, "set either emptyDir or persistentVolumeClaim, not both"},
		{"pvc without claim or size", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{}
		}, "set claimName (existing claim) or size (new claim), exactly one"},
		{"bad git URL", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "file:///etc"}
		}, "spec.workspace.git.repository must be an https://, http://, ssh:// or user@host:path URL"},
		{"working dir escapes", func(s *agentsv1.AgentSession) { s.Spec.Subagents.WorkingDir = "../etc" },
			"spec.subagents.workingDir must be relative to /workspace and must not contain '..'"},
		{"non-positive output limit", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.OutputLimits = map[string]int32{"shell": 0}
		}, "spec.tools.outputLimits values must be positive character counts"},
		{"name too long for the pod", func(s *agentsv1.AgentSession) { s.Name = strings.Repeat("a", 60) },
			"metadata.name must be at most 59 characters"},
		{"empty message text", func(s *agentsv1.AgentSession) {
			s.Spec.Messages = []agentsv1.Message{{Name: "m1", Kind: agentsv1.MessageSteer, Text: ""}}
		}, "spec.messages[0].text in body should be at least 1 chars long"},
		{"message kind", func(s *agentsv1.AgentSession) {
			s.Spec.Messages = []agentsv1.Message{{Name: "m1", Kind: "interrupt", Text: "stop"}}
		}, `Unsupported value: "interrupt": supported values: "steer", "followUp"`},
		{"bad duration", func(s *agentsv1.AgentSession) { s.Spec.Limits.Deadline = dur(-time.Hour) },
			"spec.limits.deadline in body should match"},
		{"negative tool rounds", func(s *agentsv1.AgentSession) { s.Spec.Limits.MaxToolRoundsPerInput = -1 },
			"spec.limits.maxToolRoundsPerInput in body should be greater than or equal to 0"},
		{"negative ttl", func(s *agentsv1.AgentSession) { s.Spec.TTLSecondsAfterFinished = ptr.To[int32](-1) },
			"spec.ttlSecondsAfterFinished in body should be greater than or equal to 0"},
		{"maxDepth too deep", func(s *agentsv1.AgentSession) { s.Spec.Subagents.MaxDepth = ptr.To[int32](6) },
			"spec.subagents.maxDepth in body should be less than or equal to 5"},
		{"too many children", func(s *agentsv1.AgentSession) { s.Spec.Subagents.MaxChildren = ptr.To[int32](257) },
			"spec.subagents.maxChildren in body should be less than or equal to 256"},
		{"unknown subagent workspace", func(s *agentsv1.AgentSession) { s.Spec.Subagents.Workspace = "remote" },
			`spec.subagents.workspace: Unsupported value: "remote": supported values: "shared", "isolated"`},
		{"unknown tool profile", func(s *agentsv1.AgentSession) { s.Spec.Tools.Profile = "mistral" },
			`spec.tools.profile: Unsupported value: "mistral": supported values: "openai", "anthropic", "gemini"`},
		{"message name not a DNS label", func(s *agentsv1.AgentSession) {
			s.Spec.Messages = []agentsv1.Message{{Name: "Bad_Name", Kind: agentsv1.MessageSteer, Text: "hi"}}
		}, "spec.messages[0].name in body should match"},
		{"git ref read as an option", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "https://example.com/app.git", Ref: "--orphan=x"}
		}, "spec.workspace.git.ref must not start with '-'"},
		{"git host read as an option", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Git = &agentsv1.GitSource{Repository: "ssh://-oProxyCommand=touch%20pwned/app.git"}
		}, "spec.workspace.git.repository must not name a host starting with '-'"},
		{"runtime class not a DNS name", func(s *agentsv1.AgentSession) { s.Spec.Workspace.RuntimeClassName = ptr.To("Not_Valid") },
			"spec.workspace.runtimeClassName in body should match"},
		{"egress host is a URL", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.AllowedEgressHosts = []string{"https://github.com"}
		}, "spec.workspace.allowedEgressHosts[0] in body should match"},
		{"egress CIDR out of range", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.AllowedEgressHosts = []string{"10.0.0.0/33"}
		}, "spec.workspace.allowedEgressHosts: a CIDR entry must be a valid IPv4 prefix such as 10.0.0.0/8"},
		{"egress port out of range", func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.AllowedEgressHosts = []string{"pypi.org:70000"}
		}, "spec.workspace.allowedEgressHosts: a port must be between 1 and 65535"},
		{"policy action unknown", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.Policy = &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{{Tool: "shell", Action: "maybe"}}}
		}, `spec.tools.policy.rules[0].action: Unsupported value: "maybe": supported values: "allow", "deny", "ask"`},
		{"policy default action unknown", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.Policy = &agentsv1.ToolPolicy{DefaultAction: "block"}
		}, `spec.tools.policy.defaultAction: Unsupported value: "block"`},
		{"policy tool is a regexp", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.Policy = &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{{Tool: "^(shell|grep)$", Action: agentsv1.PolicyDeny}}}
		}, "spec.tools.policy.rules[0].tool in body should match"},
		{"policy rule without tool", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.Policy = &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{{Action: agentsv1.PolicyDeny}}}
		}, "spec.tools.policy.rules[0].tool in body should be at least 1 chars long"},
		{"policy command pattern on a file tool", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.Policy = &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{
				{Tool: "write_file", CommandPattern: "rm *", Action: agentsv1.PolicyDeny}}}
		}, "spec.tools.policy.rules[].commandPattern only applies to the shell tool: set tool to shell (or *)"},
		{"tool search disabled with a threshold", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.ToolSearch = &agentsv1.ToolSearchSpec{Disabled: true, Threshold: ptr.To[int32](10)}
		}, "spec.tools.toolSearch: set disabled or the thresholds, not both"},
		{"tool search threshold zero", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.ToolSearch = &agentsv1.ToolSearchSpec{Threshold: ptr.To[int32](0)}
		}, "spec.tools.toolSearch.threshold in body should be greater than or equal to 1"},
		{"tool search byte threshold too small", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.ToolSearch = &agentsv1.ToolSearchSpec{ThresholdBytes: ptr.To[int32](100)}
		}, "spec.tools.toolSearch.thresholdBytes in body should be greater than or equal to 1024"},
		{"mcp server with neither url nor command", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "none"}}
		}, "spec.tools.mcpServers[]: set exactly one of url (a remote server the manager connects to) or command (a stdio server run in the workspace)"},
		{"mcp server with url and command", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "both", URL: "http://mcp.example/mcp", Command: []string{"mcp-server"}}}
		}, "spec.tools.mcpServers[]: set exactly one of url"},
		{"stdio mcp server with headers", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "h", Command: []string{"mcp-server"},
				HeadersSecretRef: &agentsv1.MCPHeadersSecretRef{Name: "h"}}}
		}, "spec.tools.mcpServers[].headersSecretRef applies to remote servers (url) only"},
		{"remote mcp server with env", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "e", URL: "http://mcp.example/mcp", Env: []agentsv1.MCPEnvVar{{Name: "A", Value: "b"}}}}
		}, "spec.tools.mcpServers[].env and workingDir apply to stdio servers (command) only"},
		{"web search with allowed and blocked domains", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, AllowedDomains: []string{"go.dev"}, BlockedDomains: []string{"example.com"}}
		}, "spec.tools.webSearch: set allowedDomains or blockedDomains, not both"},
		{"web search maxUses above cap", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, MaxUses: ptr.To[int32](51)}
		}, "spec.tools.webSearch.maxUses in body should be less than or equal to 50"},
		{"web search domain with a scheme", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, AllowedDomains: []string{"https://go.dev"}}
		}, "spec.tools.webSearch.allowedDomains[0] in body should match"},
		{"web search on Chat Completions", func(s *agentsv1.AgentSession) {
			s.Spec.Model.Provider = agentsv1.ProviderOpenAICompatible
			s.Spec.Model.BaseURL = "http://vllm:8000/v1"
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true}
		}, "the openai-compatible provider (Chat Completions) has no server-side web search"},
		{"web search maxUses on openai", func(s *agentsv1.AgentSession) {
			s.Spec.Model.Provider = agentsv1.ProviderOpenAI
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, MaxUses: ptr.To[int32](3)}
		}, "spec.tools.webSearch.maxUses is an option of the anthropic provider only"},
		{"web search blocked domains on openai", func(s *agentsv1.AgentSession) {
			s.Spec.Model.Provider = agentsv1.ProviderOpenAI
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, BlockedDomains: []string{"example.com"}}
		}, "spec.tools.webSearch.blockedDomains is an option of the anthropic provider only"},
		{"web search allowed domains on gemini", func(s *agentsv1.AgentSession) {
			s.Spec.Model.Provider = agentsv1.ProviderGemini
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true, AllowedDomains: []string{"go.dev"}}
		}, "spec.tools.webSearch.allowedDomains is an option of the anthropic and openai providers only"},
		{"stdio mcp server env name", func(s *agentsv1.AgentSession) {
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "e", Command: []string{"x"}, Env: []agentsv1.MCPEnvVar{{Name: "A-B"}}}}
		}, "spec.tools.mcpServers[0].env[0].name in body should match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSession(ns)
			tc.mutate(s)
			err := testClient.Create(t.Context(), s)
			assertInvalid(t, err, tc.want)
		})
	}
}

func TestAPIServerRejectsInvalidUpdates(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(*agentsv1.AgentSession)
		mutate func(*agentsv1.AgentSession)
		want   string
	}{
		{"prompt is immutable", nil, func(s *agentsv1.AgentSession) { s.Spec.Prompt = "Something else" },
			"spec.prompt is immutable: append a message to spec.messages"},
		{"model is immutable", nil, func(s *agentsv1.AgentSession) { s.Spec.Model.Name = "claude-opus-4" },
			"spec.model is immutable: create a new AgentSession to use another model"},
		{"messages cannot be removed", withMessages("m1", "m2"), func(s *agentsv1.AgentSession) {
			s.Spec.Messages = s.Spec.Messages[1:]
		}, "spec.messages is append-only: existing messages cannot be removed"},
		{"messages cannot be edited", withMessages("m1"), func(s *agentsv1.AgentSession) {
			s.Spec.Messages[0].Text = "changed"
		}, "spec.messages entries are immutable: append a new message with a new name"},
		{"abort cannot be unset", func(s *agentsv1.AgentSession) { s.Spec.Abort = true },
			func(s *agentsv1.AgentSession) { s.Spec.Abort = false },
			"spec.abort cannot be unset once set"},
		{"workspace image is immutable", func(s *agentsv1.AgentSession) { s.Spec.Workspace.Image = "busybox" },
			func(s *agentsv1.AgentSession) { s.Spec.Workspace.Image = "alpine" },
			"spec.workspace.image is immutable"},
		{"tool policy cannot be loosened", withPolicy, func(s *agentsv1.AgentSession) {
			s.Spec.Tools.Policy.Rules[0].Action = agentsv1.PolicyAllow
		}, "spec.tools.policy is immutable"},
		{"tool policy cannot be removed", withPolicy, func(s *agentsv1.AgentSession) { s.Spec.Tools.Policy = nil },
			"spec.tools.policy is immutable"},
		{"tool policy cannot be added", nil, func(s *agentsv1.AgentSession) { withPolicy(s) },
			"spec.tools.policy is immutable"},
		{"web search is immutable", nil, func(s *agentsv1.AgentSession) {
			s.Spec.Tools.WebSearch = &agentsv1.WebSearchSpec{Enabled: true}
		}, "spec.tools.webSearch is immutable"},
		{"volume is immutable", nil, func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{Size: ptr.To(resource.MustParse("1Gi"))}
		}, "spec.workspace.volume is immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSession("default")
			if tc.setup != nil {
				tc.setup(s)
			}
			if err := testClient.Create(t.Context(), s); err != nil {
				t.Fatalf("create valid session: %v", err)
			}
			t.Cleanup(func() { _ = testClient.Delete(t.Context(), s) })
			assertInvalid(t, updateLatest(t, s, tc.mutate), tc.want)
		})
	}
}

func TestAPIServerAcceptsAppendedMessages(t *testing.T) {
	s := validSession("default")
	withMessages("m1")(s)
	withPolicy(s) // the policy's immutability rule lets other fields change
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = testClient.Delete(t.Context(), s) })
	err := updateLatest(t, s, func(s *agentsv1.AgentSession) {
		s.Spec.Messages = append(s.Spec.Messages, agentsv1.Message{Name: "m2", Kind: agentsv1.MessageSteer, Text: "also add tests"})
	})
	if err != nil {
		t.Fatalf("appending a message was rejected: %v", err)
	}
	if got := s.Spec.Subagents.MaxDepth; got == nil || *got != 1 {
		t.Errorf("subagents.maxDepth default = %v, want 1", got)
	}
}

// updateLatest applies mutate to the latest version of s and updates it,
// retrying when the controller changed the object in between.
func updateLatest(t *testing.T, s *agentsv1.AgentSession, mutate func(*agentsv1.AgentSession)) error {
	t.Helper()
	for {
		if err := testClient.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		mutate(s)
		err := testClient.Update(t.Context(), s)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

func withPolicy(s *agentsv1.AgentSession) {
	s.Spec.Tools.Policy = &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{
		{Tool: "shell", CommandPattern: "git push*", Action: agentsv1.PolicyDeny}}}
}

func withMessages(names ...string) func(*agentsv1.AgentSession) {
	return func(s *agentsv1.AgentSession) {
		for _, n := range names {
			s.Spec.Messages = append(s.Spec.Messages, agentsv1.Message{Name: n, Kind: agentsv1.MessageFollowUp, Text: "text of " + n})
		}
	}
}

func assertInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the API server accepted the object; want rejection containing %q", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error is not Invalid: %v", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error does not say %q:\n%v", want, err)
	}
}
