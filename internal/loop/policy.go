package loop

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
)

// Decision is a tool policy verdict (seed 004 watchdog).
type Decision string

// Policy decisions. Ask needs a human; sessions without an Approver are
// headless and treat Ask as Deny.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Ask   Decision = "ask"
)

// PolicyRequest is what a ToolPolicy sees before a tool runs: the call has
// already been validated against the tool's schema.
type PolicyRequest struct {
	SessionID string
	ToolName  string
	CallID    string
	Arguments json.RawMessage
	// Command is the "command" argument of shell calls, else empty.
	Command string
}

// Verdict is a Decision with the reason given to the model (Deny) or shown
// to the approver (Ask).
type Verdict struct {
	Decision Decision
	Reason   string
}

// ToolPolicy is the pre-execute hook between VALIDATE and EXECUTE (seed 000
// §3.8 / seed 004). It must be safe for concurrent use.
type ToolPolicy interface {
	Check(ctx context.Context, req PolicyRequest) Verdict
}

// PolicyFunc adapts a function to ToolPolicy.
type PolicyFunc func(ctx context.Context, req PolicyRequest) Verdict

// Check implements ToolPolicy.
func (f PolicyFunc) Check(ctx context.Context, req PolicyRequest) Verdict { return f(ctx, req) }

// Approver asks a human about an Ask verdict; it returns true to allow the
// call once. Sessions without one are headless.
type Approver func(ctx context.Context, req PolicyRequest, reason string) (bool, error)

// CommandRule matches shell commands by a wildcard pattern applied to the
// whole command line, trimmed: "*" matches any text (including "/" and
// spaces), "?" one character, e.g. "rm -rf *" or "git push*".
type CommandRule struct {
	Pattern  string
	Decision Decision
	Reason   string
}

// Rules is a simple ToolPolicy: the first matching CommandRule decides shell
// calls, then Tools decides by tool name, then Default (empty means Allow).
type Rules struct {
	Commands []CommandRule
	Tools    map[string]Decision
	Default  Decision
}

// Check implements ToolPolicy.
func (r Rules) Check(_ context.Context, req PolicyRequest) Verdict {
	if req.Command != "" {
		cmd := strings.TrimSpace(req.Command)
		for _, rule := range r.Commands {
			if WildcardPattern(rule.Pattern).MatchString(cmd) {
				reason := rule.Reason
				if reason == "" {
					reason = "the command matches the policy pattern " + rule.Pattern
				}
				return Verdict{Decision: rule.Decision, Reason: reason}
			}
		}
	}
	if d, ok := r.Tools[req.ToolName]; ok {
		return Verdict{Decision: d, Reason: "the policy says " + string(d) + " for tool " + req.ToolName}
	}
	if r.Default != "" {
		return Verdict{Decision: r.Default, Reason: "the policy default is " + string(r.Default)}
	}
	return Verdict{Decision: Allow}
}

// shellCommand extracts the "command" argument of a call, if any.
func shellCommand(args json.RawMessage) string {
	var a struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(args, &a) // already schema-validated; absent means ""
	return a.Command
}

// WildcardPattern compiles a wildcard pattern anchored at both ends: "*" is
// any text (newlines included), "?" one character, everything else literal.
// Every pattern compiles, so a policy can never hold an invalid one.
func WildcardPattern(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^(?s)`)
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}
