package v1alpha1

// PolicyAction is the verdict of a tool policy rule (seed 004's watchdog).
// +kubebuilder:validation:Enum=allow;deny;ask
type PolicyAction string

// Policy actions. Sessions run headless, so ask behaves as deny.
const (
	// PolicyAllow lets the call run.
	PolicyAllow PolicyAction = "allow"
	// PolicyDeny refuses the call; the model gets the reason as the tool's error result.
	PolicyDeny PolicyAction = "deny"
	// PolicyAsk needs a human's approval; AgentSessions have none, so ask is deny.
	PolicyAsk PolicyAction = "ask"
)

// ToolPolicy decides, before every tool call, whether it may run. The first rule that matches
// decides; when none does, defaultAction does. A refused call never runs: the model receives
// "denied by policy: <reason>" as the tool's error result and can adjust.
type ToolPolicy struct {
	// defaultAction applies when no rule matches: allow (default), deny or ask. Sessions are
	// headless, so ask means deny.
	// +optional
	// +kubebuilder:default=allow
	DefaultAction PolicyAction `json:"defaultAction,omitempty"`

	// rules are checked in order; the first match decides.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Rules []ToolPolicyRule `json:"rules,omitempty"`
}

// ToolPolicyRule matches tool calls by tool name and, for the shell tool, by command line.
// Patterns are wildcards, not regular expressions: "*" matches any text (also spaces and
// "/"), "?" one character, every other character itself; a pattern can therefore never be
// invalid.
//
// +kubebuilder:validation:XValidation:rule="!has(self.commandPattern) || self.tool in ['shell', '*']",message="spec.tools.policy.rules[].commandPattern only applies to the shell tool: set tool to shell (or *)"
type ToolPolicyRule struct {
	// tool is a tool name or a wildcard over tool names, e.g. shell, write_file, *_file or *.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.*?-]+$`
	Tool string `json:"tool"`

	// commandPattern matches the whole command line of a shell call (leading and trailing
	// spaces removed), e.g. "rm -rf *", "git push*" or "*curl *". Unset matches any command.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	CommandPattern string `json:"commandPattern,omitempty"`

	// action is allow, deny or ask (ask means deny: sessions are headless).
	// +required
	Action PolicyAction `json:"action"`

	// reason is told to the model when the rule refuses a call. Default: a sentence naming
	// the rule.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}
