package main

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
)

// `kubectl agent get NAME` shows the plan and the context accounting.
func TestDescribeShowsPlanAndContext(t *testing.T) {
	s := v1alpha1.AgentSession{}
	s.Name, s.Namespace = "long", "default"
	s.Status.Phase = v1alpha1.PhaseRunning
	s.Status.Context = &v1alpha1.ContextStatus{Window: 200000, LastRequestTokens: 50000, Compactions: 2}
	s.Status.Plan = []v1alpha1.PlanStep{{Content: "read the code", Status: v1alpha1.PlanStepCompleted},
		{Content: "fix the bug", Status: v1alpha1.PlanStepInProgress}, {Content: "run the tests", Status: v1alpha1.PlanStepPending}}
	var b strings.Builder
	if err := describe(&b, &s, []v1alpha1.AgentSession{s}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"50000 of 200000 tokens in the last request (25%), compacted 2 times",
		"Plan (1/3 done):\n  [x] read the code\n  [>] fix the bug\n  [ ] run the tests\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe printed no %q:\n%s", want, b.String())
		}
	}
}
