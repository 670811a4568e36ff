package runner

import (
	"reflect"
	"testing"

	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm"
)

// spec.tools.webSearch becomes the web search option of every model
// request only when enabled.
func TestWebSearchConfig(t *testing.T) {
	tests := []struct {
		name string
		ws   *agentsv1.WebSearchSpec
		want *llm.WebSearch
	}{
		{"unset", nil, nil},
		{"not enabled", &agentsv1.WebSearchSpec{MaxUses: ptr.To[int32](3)}, nil},
		{"enabled", &agentsv1.WebSearchSpec{Enabled: true}, &llm.WebSearch{}},
		{"options", &agentsv1.WebSearchSpec{Enabled: true, MaxUses: ptr.To[int32](3), AllowedDomains: []string{"go.dev"}},
			&llm.WebSearch{MaxUses: 3, AllowedDomains: []string{"go.dev"}}},
		{"blocked", &agentsv1.WebSearchSpec{Enabled: true, BlockedDomains: []string{"example.com"}},
			&llm.WebSearch{BlockedDomains: []string{"example.com"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := webSearchConfig(&agentsv1.AgentSessionSpec{Tools: agentsv1.ToolsSpec{WebSearch: tc.ws}})
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("webSearchConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}
