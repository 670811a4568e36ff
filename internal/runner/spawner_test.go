package runner

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestChildSession(t *testing.T) {
	parent := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: "lead", Namespace: "team", UID: "p-uid"},
		Spec: agentsv1.AgentSessionSpec{
			Prompt:    "lead the work",
			Model:     agentsv1.ModelSpec{Provider: agentsv1.ProviderAnthropic, Name: "big", APIKeySecretRef: &agentsv1.SecretKeyRef{Name: "k", Key: "a"}},
			Limits:    agentsv1.Limits{MaxTurns: 100, TokenBudget: 5000},
			Subagents: agentsv1.SubagentsSpec{MaxDepth: ptr.To[int32](2)},
		},
	}
	cases := []struct {
		name  string
		mode  agentsv1.SubagentWorkspaceMode
		req   tool.SpawnRequest
		check func(t *testing.T, c *agentsv1.AgentSession)
	}{
		{"shared by default, inherits the model", "", tool.SpawnRequest{Task: "write tests", WorkingDir: "tests"}, func(t *testing.T, c *agentsv1.AgentSession) {
			if c.Spec.Prompt != "write tests" || c.Spec.Model.Name != "big" || c.Spec.Model.APIKeySecretRef.Name != "k" ||
				*c.Spec.Depth != 1 || c.Spec.ParentRef.UID != "p-uid" || c.Spec.Subagents.WorkingDir != "tests" ||
				c.Spec.Limits.MaxTurns != 100 || c.Spec.Limits.TokenBudget != 5000 {
				t.Errorf("spec = %+v", c.Spec)
			}
			if c.Annotations[agentsv1.AnnotationSharedWorkspace] != "lead" || c.Labels[agentsv1.LabelParentUID] != "p-uid" {
				t.Errorf("meta = %v %v", c.Labels, c.Annotations)
			}
			if owner, uid := WorkspaceOwner(c); owner != "lead" || uid != "p-uid" {
				t.Errorf("workspace owner = %s %s", owner, uid)
			}
			if ref := metav1.GetControllerOf(c); ref == nil || ref.UID != "p-uid" || ref.Kind != "AgentSession" {
				t.Errorf("controller = %+v", ref)
			}
		}},
		{"isolated, model and turns overridden", agentsv1.SubagentWorkspaceIsolated, tool.SpawnRequest{Task: "t", Model: "small", MaxTurns: 7}, func(t *testing.T, c *agentsv1.AgentSession) {
			if c.Spec.Model.Name != "small" || c.Spec.Limits.MaxTurns != 7 {
				t.Errorf("spec = %+v", c.Spec)
			}
			if _, ok := c.Annotations[agentsv1.AnnotationSharedWorkspace]; ok {
				t.Error("an isolated child must get its own pod")
			}
			if owner, _ := WorkspaceOwner(c); owner != c.Name {
				t.Errorf("workspace owner = %s", owner)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := parent.DeepCopy()
			p.Spec.Subagents.Workspace = tc.mode
			c := (&childSpawner{parent: p}).child(tc.req, childName(p.Name, 1))
			if c.Name != "lead-sub-1" {
				t.Errorf("name = %s", c.Name)
			}
			tc.check(t, c)
		})
	}
	if n := childName(strings.Repeat("x", 59), 12); len(n) > 59 {
		t.Errorf("child name %q is longer than 59", n)
	}
}
