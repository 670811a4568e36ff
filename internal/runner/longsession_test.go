package runner

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// Context accounting, compactions and the plan reach Progress (and so
// status.context and status.plan); the plan is bounded.
func TestApplyEventContextAndPlan(t *testing.T) {
	long := make([]loop.PlanItem, agentsv1.MaxPlanSteps+5)
	for i := range long {
		long[i] = loop.PlanItem{Content: fmt.Sprintf("step %d %s", i, strings.Repeat("x", 300)), Status: loop.PlanPending}
	}
	var p Progress
	for _, e := range []loop.Event{
		ev(1, loop.EventAssistantTextEnd, loop.EventData{Context: &loop.ContextUsage{Window: 200_000, RequestTokens: 150_000}}),
		ev(2, loop.EventContextCompacted, loop.EventData{Compaction: &loop.Compaction{Turns: 10}}),
		ev(3, loop.EventPlanUpdated, loop.EventData{Plan: []loop.PlanItem{{Content: "a", Status: loop.PlanCompleted}}}),
		ev(4, loop.EventAssistantTextEnd, loop.EventData{Context: &loop.ContextUsage{Window: 200_000, RequestTokens: 40_000}}),
	} {
		applyEvent(&p, e)
	}
	if p.Context.Window != 200_000 || p.Context.RequestTokens != 40_000 || p.Compactions != 1 {
		t.Errorf("context %+v, %d compactions; want the last request's accounting and 1", p.Context, p.Compactions)
	}
	if len(p.Plan) != 1 || p.Plan[0] != (agentsv1.PlanStep{Content: "a", Status: agentsv1.PlanStepCompleted}) {
		t.Errorf("plan %+v", p.Plan)
	}
	applyEvent(&p, ev(5, loop.EventPlanUpdated, loop.EventData{Plan: long}))
	if len(p.Plan) != agentsv1.MaxPlanSteps || len(p.Plan[0].Content) != loop.MaxPlanItemLength {
		t.Errorf("plan of %d steps (first %d bytes), want it bounded to %d steps of %d bytes",
			len(p.Plan), len(p.Plan[0].Content), agentsv1.MaxPlanSteps, loop.MaxPlanItemLength)
	}
}

func TestLoopConfigCompaction(t *testing.T) {
	cfg := loopConfig(&agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderAnthropic,
		Name: "claude-sonnet-4-5", ContextWindow: 50_000, CompactionModel: "claude-haiku-4-5"}})
	if cfg.Compaction.ContextWindow != 50_000 || cfg.Compaction.Model != "claude-haiku-4-5" || cfg.Compaction.Disabled {
		t.Errorf("compaction config %+v", cfg.Compaction)
	}
}

func TestSkillsFromConfigMap(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Data: map[string]string{
		"review.md": "---\nname: review\ndescription: Review rules.\n---\nBody.",
		"broken.md": "no front matter",
	}}
	tests := []struct {
		name     string
		keys     []string
		skills   []string
		problems int
		err      string
	}{
		{"every key", nil, []string{"review"}, 1, ""},
		{"selected keys", []string{"review.md"}, []string{"review"}, 0, ""},
		{"missing key", []string{"nope.md"}, nil, 0, `has no key "nope.md"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skills, problems, err := skillsFromConfigMap(cm, tt.keys)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			var names []string
			for _, s := range skills {
				names = append(names, s.Name)
			}
			if err != nil || fmt.Sprint(names) != fmt.Sprint(tt.skills) || len(problems) != tt.problems {
				t.Errorf("skills %v, problems %q, err %v", names, problems, err)
			}
			if len(skills) > 0 && skills[0].Source != "configmap/team/review.md" {
				t.Errorf("source %q", skills[0].Source)
			}
		})
	}
}
