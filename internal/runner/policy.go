package runner

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// specPolicy is spec.tools.policy as a loop.ToolPolicy: the first matching
// rule decides, else the default action. It is immutable after construction
// and so safe for concurrent use.
type specPolicy struct {
	rules []compiledRule
	def   loop.Decision
}

type compiledRule struct {
	tool    *regexp.Regexp
	command *regexp.Regexp // nil: any command (and calls without one)
	action  loop.Decision
	reason  string
}

// toolPolicy returns the policy of spec.tools.policy, or nil when the spec
// has none (every call is allowed).
func toolPolicy(spec *agentsv1.AgentSessionSpec) loop.ToolPolicy {
	p := spec.Tools.Policy
	if p == nil {
		return nil
	}
	sp := &specPolicy{def: decision(p.DefaultAction)}
	for i, r := range p.Rules {
		cr := compiledRule{tool: loop.WildcardPattern(r.Tool), action: decision(r.Action), reason: r.Reason}
		if r.CommandPattern != "" {
			cr.command = loop.WildcardPattern(r.CommandPattern)
		}
		if cr.reason == "" {
			cr.reason = defaultReason(i, r)
		}
		sp.rules = append(sp.rules, cr)
	}
	return sp
}

// Check implements loop.ToolPolicy.
func (p *specPolicy) Check(_ context.Context, req loop.PolicyRequest) loop.Verdict {
	cmd := strings.TrimSpace(req.Command)
	for _, r := range p.rules {
		if !r.tool.MatchString(req.ToolName) {
			continue
		}
		if r.command != nil && (cmd == "" || !r.command.MatchString(cmd)) {
			continue
		}
		return loop.Verdict{Decision: r.action, Reason: r.reason}
	}
	if p.def == loop.Allow {
		return loop.Verdict{Decision: loop.Allow}
	}
	return loop.Verdict{Decision: p.def, Reason: fmt.Sprintf(
		"no rule of spec.tools.policy allows %s, and its defaultAction is %s", req.ToolName, p.def)}
}

// decision maps an API action onto the loop's; empty is allow (the API default).
func decision(a agentsv1.PolicyAction) loop.Decision {
	switch a {
	case agentsv1.PolicyDeny:
		return loop.Deny
	case agentsv1.PolicyAsk:
		return loop.Ask
	default:
		return loop.Allow
	}
}

func defaultReason(i int, r agentsv1.ToolPolicyRule) string {
	what := "tool " + r.Tool
	if r.CommandPattern != "" {
		what += " with a command matching " + r.CommandPattern
	}
	return fmt.Sprintf("spec.tools.policy rule %d (%s) says %s", i+1, what, r.Action)
}
