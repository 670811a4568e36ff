package runner

import (
	"slices"
	"strings"
	"testing"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// spec.tools.webFetch puts web_fetch into every profile; it is off by
// default and disabledTools still removes it.
func TestBuildProfileWebFetch(t *testing.T) {
	for _, prof := range []string{"openai", "anthropic", "gemini"} {
		tests := []struct {
			name     string
			tools    agentsv1.ToolsSpec
			want     bool
			describe string
		}{
			{"off by default", agentsv1.ToolsSpec{Profile: prof}, false, ""},
			{"present but not enabled", agentsv1.ToolsSpec{Profile: prof, WebFetch: &agentsv1.WebFetchSpec{MaxCalls: 5}}, false, ""},
			{"enabled", agentsv1.ToolsSpec{Profile: prof, WebFetch: &agentsv1.WebFetchSpec{Enabled: true, MaxCalls: 7}}, true, "at most 7 web_fetch calls"},
			{"enabled but disabled by name", agentsv1.ToolsSpec{Profile: prof, WebFetch: &agentsv1.WebFetchSpec{Enabled: true},
				DisabledTools: []string{"web_fetch"}}, false, ""},
		}
		for _, tc := range tests {
			t.Run(prof+"/"+tc.name, func(t *testing.T) {
				p, err := buildProfile(&agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Name: "m"}, Tools: tc.tools})
				if err != nil {
					t.Fatal(err)
				}
				if got := slices.Contains(p.Registry().Names(), "web_fetch"); got != tc.want {
					t.Fatalf("web_fetch offered = %v, want %v (tools %v)", got, tc.want, p.Registry().Names())
				}
				if !tc.want {
					return
				}
				rt, _ := p.Registry().Get("web_fetch")
				if !strings.Contains(rt.Definition.Description, tc.describe) {
					t.Errorf("description %q does not say %q", rt.Definition.Description, tc.describe)
				}
			})
		}
	}
}
