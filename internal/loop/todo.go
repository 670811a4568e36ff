package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Bounds of the plan kept with the todo tool (seed 004).
const (
	MaxPlanItems       = 30
	MaxPlanItemLength  = 200
	TodoToolName       = "todo"
	PlanPending        = "pending"
	PlanInProgress     = "in_progress"
	PlanCompleted      = "completed"
	planStatusesString = PlanPending + ", " + PlanInProgress + ", " + PlanCompleted
)

// PlanItem is one step of the model's plan.
type PlanItem struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

// Plan returns the current plan (the last todo call's list).
func (s *Session) Plan() []PlanItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.plan)
}

func (s *Session) todoTool() tool.Registered {
	params := fmt.Sprintf(`{"type":"object","properties":{"todos":{"type":"array","maxItems":%d,
"description":"The whole plan, in order; it replaces the previous one.",
"items":{"type":"object","properties":{
"content":{"type":"string","description":"One step, imperative and short."},
"status":{"type":"string","enum":["pending","in_progress","completed"]}},
"required":["content","status"]}}},"required":["todos"]}`, MaxPlanItems)
	return tool.Registered{
		Definition: tool.Definition{
			Name: TodoToolName,
			Description: "Keep a short plan of the task (at most " + fmt.Sprint(MaxPlanItems) + " steps): send the whole list " +
				"each time, marking steps pending, in_progress (one at a time) or completed. The people watching " +
				"the session see it.",
			Parameters: json.RawMessage(params),
		},
		Executor:   s.runTodo,
		Idempotent: true,
	}
}

func (s *Session) runTodo(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var args struct {
		Todos []PlanItem `json:"todos"`
	}
	if err := json.Unmarshal(inv.Arguments, &args); err != nil {
		return tool.Result{Output: "invalid arguments: " + err.Error(), IsError: true}, nil
	}
	if msg := checkPlan(args.Todos); msg != "" {
		return tool.Result{Output: msg, IsError: true}, nil
	}
	plan := slices.Clone(args.Todos)
	if plan == nil {
		plan = []PlanItem{}
	}
	s.mu.Lock()
	s.plan = plan
	s.mu.Unlock()
	if err := s.emit(ctx, EventPlanUpdated, EventData{Plan: plan, CallID: inv.CallID}); err != nil {
		return tool.Result{}, fmt.Errorf("publish plan: %w", err)
	}
	return tool.Result{Output: RenderPlan(plan)}, nil
}

// checkPlan returns what is wrong with plan, or "".
func checkPlan(plan []PlanItem) string {
	if len(plan) > MaxPlanItems {
		return fmt.Sprintf("the plan has %d steps; keep it to at most %d (merge or drop finished ones)", len(plan), MaxPlanItems)
	}
	for i, it := range plan {
		switch {
		case strings.TrimSpace(it.Content) == "":
			return fmt.Sprintf("step %d has no content", i+1)
		case len(it.Content) > MaxPlanItemLength:
			return fmt.Sprintf("step %d is %d characters long; keep steps under %d", i+1, len(it.Content), MaxPlanItemLength)
		case it.Status != PlanPending && it.Status != PlanInProgress && it.Status != PlanCompleted:
			return fmt.Sprintf("step %d has status %q; use one of %s", i+1, it.Status, planStatusesString)
		}
	}
	return ""
}

// RenderPlan renders a plan as a checklist: [x] completed, [>] in
// progress, [ ] pending.
func RenderPlan(plan []PlanItem) string {
	if len(plan) == 0 {
		return "Plan cleared."
	}
	var b strings.Builder
	done := 0
	for _, it := range plan {
		if it.Status == PlanCompleted {
			done++
		}
	}
	fmt.Fprintf(&b, "Plan (%d/%d done):\n", done, len(plan))
	for _, it := range plan {
		mark := "[ ]"
		switch it.Status {
		case PlanCompleted:
			mark = "[x]"
		case PlanInProgress:
			mark = "[>]"
		}
		fmt.Fprintf(&b, "%s %s\n", mark, it.Content)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
