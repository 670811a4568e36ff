package runner

import (
	"time"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// Progress is a snapshot of a session as the runner sees it.
type Progress struct {
	// Phase is Running, AwaitingInput, Succeeded, Failed or Aborted; empty
	// while the runner is still starting.
	Phase agentsv1.Phase
	// Reason is a condition reason for Phase (agentsv1.Reason*).
	Reason string
	// Error explains Failed.
	Error     string
	Turns     int32
	ToolCalls int32
	Usage     llm.Usage
	// Cost is what the model calls cost (Options.Prices), in Currency;
	// Currency is empty when the price table has no price for the model.
	Cost     pricing.Amount
	Currency string
	// Result is the last assistant text, cut at agentsv1.MaxResultBytes.
	Result          string
	ResultTruncated bool
	LastSeq         uint64
	// Delivered are the names of spec.messages given to the loop, in order.
	Delivered []string
	// StartTime is when the loop first started (the first journaled event).
	StartTime time.Time
	// JournalAvailable is false while the journal cannot be reached.
	JournalAvailable bool
	JournalError     string
	// Done is set when the runner goroutine has ended.
	Done bool
	// Restored is set once the journal was read: Delivered is then what the
	// journal holds.
	Restored bool
	// Worked is the working time of the inputs that ended; InputSince is
	// when the running input started (zero while idle). Together they are
	// what spec.limits.deadline bounds (see WorkingTime).
	Worked     time.Duration
	InputSince time.Time
	// IdleSince is when the last input ended idle or awaiting input (its
	// SESSION_END's time; zero while an input runs): status.idleSince, so
	// that a change recorded after that end is never dated before it.
	IdleSince time.Time
	// ModelUnavailable is the last transient model error while the session
	// waits for the model (empty otherwise), since ModelUnavailableSince.
	ModelUnavailable      string
	ModelUnavailableSince time.Time
	// WorkspaceUnavailable is the last error of opening the workspace's
	// exec stream while a tool call of the running input waits for it
	// (empty otherwise), since WorkspaceUnavailableSince.
	WorkspaceUnavailable      string
	WorkspaceUnavailableSince time.Time
	// HistoryExpired is set when an idle session could not be restored
	// because the journal no longer holds its events.
	HistoryExpired bool
	// Foreign is set when another operator instance holds the session's
	// claim: this runner ran nothing and ended. ForeignUntil is when that
	// claim expires unless renewed. It is also set when the workspace
	// refused this instance as a superseded driver (owner.go): the runner
	// stopped at once, detached, and ForeignUntil is a claim's duration later.
	Foreign      string
	ForeignUntil time.Time
	// ClaimError is why the claim could not be read or written.
	ClaimError string
	// Owner is this instance once it holds the session's claim.
	Owner string
	// Changes is the last recording of the session's change (nil until an
	// input ended Succeeded with a recorder configured).
	Changes *changes.Result
	// Context is the context accounting of the last model call and the
	// number of compactions so far.
	Context     loop.ContextUsage
	Compactions int32
	// Plan is the agent's current plan (todo tool), at most
	// agentsv1.MaxPlanSteps steps; nil until the agent wrote one.
	Plan []agentsv1.PlanStep
	// MCPServers is the state of the session's MCP servers as of this
	// runner's start (nil without spec.tools.mcpServers).
	MCPServers []agentsv1.MCPServerStatus
}

// WorkingTime is the working time as of now.
func (p Progress) WorkingTime(now time.Time) time.Duration {
	if p.InputSince.IsZero() {
		return p.Worked
	}
	return p.Worked + max(now.Sub(p.InputSince), 0)
}

func (p Progress) clone() Progress {
	p.Delivered = append([]string(nil), p.Delivered...)
	p.Plan = append([]agentsv1.PlanStep(nil), p.Plan...)
	p.MCPServers = append([]agentsv1.MCPServerStatus(nil), p.MCPServers...)
	return p
}

// applyEvent folds one loop event into p. It is used for replayed and live
// events alike, so counters survive a restore.
func applyEvent(p *Progress, ev loop.Event) {
	if ev.Seq > p.LastSeq {
		p.LastSeq = ev.Seq
	}
	if p.StartTime.IsZero() && !ev.Time.IsZero() {
		p.StartTime = ev.Time
	}
	d := ev.Data
	switch ev.Kind {
	case loop.EventUserInput, loop.EventSteeringInjected:
		if p.Phase == "" || p.Phase == agentsv1.PhaseAwaitingInput || p.Phase == agentsv1.PhaseSucceeded {
			p.Phase, p.Reason = agentsv1.PhaseRunning, agentsv1.ReasonRunning
		}
		if ev.Kind == loop.EventUserInput && p.InputSince.IsZero() {
			p.InputSince = ev.Time
		}
		p.IdleSince = time.Time{}
	case loop.EventAssistantTextEnd:
		p.ModelUnavailable, p.ModelUnavailableSince = "", time.Time{} // the model answered
		p.Turns++
		if d.Usage != nil {
			p.Usage = p.Usage.Add(*d.Usage)
		}
		if d.Text != "" {
			p.setResult(d.Text)
		}
		if d.Context != nil {
			p.Context = *d.Context
		}
	case loop.EventContextCompacted:
		p.Compactions++
	case loop.EventPlanUpdated:
		p.Plan = planSteps(d.Plan)
	case loop.EventToolCallEnd:
		p.ToolCalls++
	case loop.EventTurnLimit:
		if d.TotalTurns > 0 {
			p.Phase, p.Reason, p.Error = agentsv1.PhaseFailed, agentsv1.ReasonTurnLimit, "spec.limits.maxTurns reached"
		}
	case loop.EventSessionEnd:
		if d.Text != "" {
			p.setResult(d.Text)
		}
		if !p.InputSince.IsZero() {
			p.Worked += max(ev.Time.Sub(p.InputSince), 0)
			p.InputSince = time.Time{}
		}
		applySessionEnd(p, ev)
	}
}

func applySessionEnd(p *Progress, ev loop.Event) {
	d := ev.Data
	switch loop.State(d.State) {
	case loop.StateAwaitingInput:
		p.Phase, p.Reason = agentsv1.PhaseAwaitingInput, agentsv1.ReasonAwaitingInput
		p.IdleSince = ev.Time
	case loop.StateIdle:
		if p.Reason != agentsv1.ReasonTurnLimit {
			p.Phase, p.Reason = agentsv1.PhaseSucceeded, agentsv1.ReasonSucceeded
			p.IdleSince = ev.Time
		}
	case loop.StateClosed:
		if p.Phase.IsFinal() && p.Phase != agentsv1.PhaseSucceeded {
			return // the runner already decided why (abort, deadline, budget)
		}
		p.Phase, p.Reason = agentsv1.PhaseFailed, agentsv1.ReasonFailed
		p.Error = d.Error
		if p.Error == "" {
			p.Error = "the agent loop was closed"
		}
	}
}

func (p *Progress) setResult(text string) {
	p.Result, p.ResultTruncated = truncateResult(text, agentsv1.MaxResultBytes)
}

// truncateResult keeps at most limit bytes of s, cut at a UTF-8 boundary.
func truncateResult(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	cut := limit
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// planSteps converts the loop's plan to status.plan steps, bounded by
// agentsv1.MaxPlanSteps steps of loop.MaxPlanItemLength bytes.
func planSteps(plan []loop.PlanItem) []agentsv1.PlanStep {
	out := make([]agentsv1.PlanStep, 0, min(len(plan), agentsv1.MaxPlanSteps))
	for _, it := range plan[:min(len(plan), agentsv1.MaxPlanSteps)] {
		c := it.Content
		if len(c) > loop.MaxPlanItemLength {
			c = c[:loop.MaxPlanItemLength]
		}
		out = append(out, agentsv1.PlanStep{Content: c, Status: agentsv1.PlanStepStatus(it.Status)})
	}
	return out
}
