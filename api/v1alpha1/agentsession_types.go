package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provider names an LLM provider.
// +kubebuilder:validation:Enum=anthropic;openai;openai-compatible;gemini;scripted
type Provider string

// Providers.
const (
	// ProviderAnthropic is the Anthropic Messages API.
	ProviderAnthropic Provider = "anthropic"
	// ProviderOpenAI is the OpenAI Responses API.
	ProviderOpenAI Provider = "openai"
	// ProviderOpenAICompatible is any Chat Completions endpoint (vLLM, Ollama, LiteLLM).
	ProviderOpenAICompatible Provider = "openai-compatible"
	// ProviderGemini is the Google Gemini API.
	ProviderGemini Provider = "gemini"
	// ProviderScripted replays a script from a ConfigMap; for demos and tests only.
	ProviderScripted Provider = "scripted"
)

// ReasoningEffort asks reasoning models to think less or more.
// +kubebuilder:validation:Enum=low;medium;high
type ReasoningEffort string

// Reasoning efforts.
const (
	ReasoningLow    ReasoningEffort = "low"
	ReasoningMedium ReasoningEffort = "medium"
	ReasoningHigh   ReasoningEffort = "high"
)

// MessageKind says when an appended message reaches the agent.
// +kubebuilder:validation:Enum=steer;followUp
type MessageKind string

// Message kinds.
const (
	// MessageSteer is injected into the running loop after the current tool round.
	MessageSteer MessageKind = "steer"
	// MessageFollowUp starts a new input once the agent has finished the current one.
	MessageFollowUp MessageKind = "followUp"
)

// SubagentWorkspaceMode says where child sessions run.
// +kubebuilder:validation:Enum=shared;isolated
type SubagentWorkspaceMode string

// Subagent workspace modes.
const (
	// SubagentWorkspaceShared runs children in the parent's workspace pod.
	SubagentWorkspaceShared SubagentWorkspaceMode = "shared"
	// SubagentWorkspaceIsolated gives each child its own workspace pod.
	SubagentWorkspaceIsolated SubagentWorkspaceMode = "isolated"
)

// Phase is the coarse lifecycle state of an AgentSession. Conditions carry the details.
// +kubebuilder:validation:Enum=Pending;Provisioning;Running;AwaitingInput;Succeeded;Failed;Aborted
type Phase string

// Phases.
const (
	// PhasePending: accepted, nothing created yet.
	PhasePending Phase = "Pending"
	// PhaseProvisioning: the workspace pod is being created or is not Ready yet.
	PhaseProvisioning Phase = "Provisioning"
	// PhaseRunning: the agent loop is processing input.
	PhaseRunning Phase = "Running"
	// PhaseAwaitingInput: the agent finished its input and waits for a follow-up message.
	PhaseAwaitingInput Phase = "AwaitingInput"
	// PhaseSucceeded: the session finished and its workspace was released.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed: the session stopped on an error, a limit or a lost workspace.
	PhaseFailed Phase = "Failed"
	// PhaseAborted: spec.abort was set or the session was deleted while running.
	PhaseAborted Phase = "Aborted"
)

// IsFinal reports whether no further work happens in phase p.
func (p Phase) IsFinal() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhaseAborted
}

// MaxResultBytes bounds status.result; longer results are cut and status.resultTruncated is set.
const MaxResultBytes = 16 * 1024

// AgentSession runs an autonomous coding agent on a task, with its tools executing in a
// workspace pod. Append to spec.messages to steer it or give it follow-up work.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ags,categories=agents
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model.name`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentRef.name`
// +kubebuilder:printcolumn:name="Turns",type=integer,JSONPath=`.status.turns`
// +kubebuilder:printcolumn:name="Tokens",type=integer,JSONPath=`.status.usage.total`
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.cost`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 59",message="metadata.name must be at most 59 characters: the workspace pod is named <name>-ws and pod names are limited to 63"
type AgentSession struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the agent should do and how it runs.
	// +required
	Spec AgentSessionSpec `json:"spec"`

	// status is the observed progress of the session, written by the operator.
	// +optional
	Status AgentSessionStatus `json:"status,omitempty"`
}

// AgentSessionSpec is the desired state of an AgentSession.
//
// +kubebuilder:validation:XValidation:rule="(has(self.depth) && self.depth > 0) == has(self.parentRef)",message="spec.parentRef must be set exactly when spec.depth > 0 (child sessions are created by their parent)"
// +kubebuilder:validation:XValidation:rule="!has(self.depth) || self.depth <= (has(self.subagents) && has(self.subagents.maxDepth) ? self.subagents.maxDepth : 1)",message="spec.depth must not exceed spec.subagents.maxDepth (default 1): raise maxDepth or spawn from a shallower session"
// +kubebuilder:validation:XValidation:rule="has(self.depth) == has(oldSelf.depth) && (!has(self.depth) || self.depth == oldSelf.depth)",message="spec.depth is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.parentRef) == has(oldSelf.parentRef) && (!has(self.parentRef) || self.parentRef == oldSelf.parentRef)",message="spec.parentRef is immutable"
// +kubebuilder:validation:XValidation:rule="!oldSelf.?abort.orValue(false) || self.?abort.orValue(false)",message="spec.abort cannot be unset once set: create a new AgentSession instead"
// +kubebuilder:validation:XValidation:rule="oldSelf.?tools.policy == self.?tools.policy",message="spec.tools.policy is immutable: create a new AgentSession to change the tool policy"
// +kubebuilder:validation:XValidation:rule="oldSelf.?tools.webFetch == self.?tools.webFetch",message="spec.tools.webFetch is immutable: create a new AgentSession to change web access"
// +kubebuilder:validation:XValidation:rule="oldSelf.?tools.webSearch == self.?tools.webSearch",message="spec.tools.webSearch is immutable: create a new AgentSession to change web search"
// +kubebuilder:validation:XValidation:rule="!self.?tools.webSearch.enabled.orValue(false) || self.model.provider != 'openai-compatible'",message="spec.tools.webSearch: the openai-compatible provider (Chat Completions) has no server-side web search; use anthropic, openai or gemini, or spec.tools.webFetch"
// +kubebuilder:validation:XValidation:rule="!has(self.tools) || !has(self.tools.webSearch) || !has(self.tools.webSearch.maxUses) || self.model.provider in ['anthropic', 'scripted']",message="spec.tools.webSearch.maxUses is an option of the anthropic provider only"
// +kubebuilder:validation:XValidation:rule="!has(self.tools) || !has(self.tools.webSearch) || !has(self.tools.webSearch.allowedDomains) || self.model.provider in ['anthropic', 'openai', 'scripted']",message="spec.tools.webSearch.allowedDomains is an option of the anthropic and openai providers only"
// +kubebuilder:validation:XValidation:rule="!has(self.tools) || !has(self.tools.webSearch) || !has(self.tools.webSearch.blockedDomains) || self.model.provider in ['anthropic', 'scripted']",message="spec.tools.webSearch.blockedDomains is an option of the anthropic provider only"
type AgentSessionSpec struct {
	// prompt is the task given to the agent as its first input. Immutable.
	// +required
	// +kubebuilder:validation:MaxLength=262144
	// +kubebuilder:validation:XValidation:rule="self.trim().size() > 0",message="spec.prompt must not be empty: describe the task for the agent"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.prompt is immutable: append a message to spec.messages to give the agent more work"
	Prompt string `json:"prompt"`

	// model selects the LLM provider and model. Immutable.
	// +required
	Model ModelSpec `json:"model"`

	// instructions are appended to the provider profile's system prompt.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Instructions string `json:"instructions,omitempty"`

	// limits bound the work the agent may do.
	// +optional
	Limits Limits `json:"limits,omitempty,omitzero"`

	// tools adjusts the tool set of the provider profile.
	// +optional
	Tools ToolsSpec `json:"tools,omitempty,omitzero"`

	// workspace describes the pod the tools run in.
	// +optional
	// +kubebuilder:default={}
	Workspace WorkspaceSpec `json:"workspace,omitempty,omitzero"`

	// subagents bounds the child sessions this session may spawn.
	// +optional
	// +kubebuilder:default={}
	Subagents SubagentsSpec `json:"subagents,omitempty,omitzero"`

	// skills are SKILL.md files shipped by platform teams in ConfigMaps of the session's
	// namespace: every key of each ConfigMap is one SKILL.md (YAML front matter with name
	// and description, then the body). They are offered alongside the skills found in the
	// workspace (.agents/skills/<name>/SKILL.md and equivalents); on a name clash the
	// ConfigMap skill wins. A key that does not parse is reported as a WARNING event.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Skills []SkillsConfigMapRef `json:"skills,omitempty"`

	// parentRef names the parent session. Set by the operator on child sessions; immutable.
	// +optional
	ParentRef *ParentReference `json:"parentRef,omitempty"`

	// depth is the nesting level: 0 for a top-level session, parent depth + 1 for a child.
	// Must not exceed subagents.maxDepth. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Depth *int32 `json:"depth,omitempty"`

	// messages are inputs for the agent after the prompt. The list is append-only: entries
	// cannot be edited or removed. Each message is delivered exactly once, in list order;
	// status.messagesDelivered records the names already delivered.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="oldSelf.all(o, self.exists(n, n.name == o.name))",message="spec.messages is append-only: existing messages cannot be removed"
	Messages []Message `json:"messages,omitempty"`

	// suspend pauses the agent after the current tool round and releases the runner; the
	// workspace pod is kept. Set it back to false to resume from the journal.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// abort stops the agent as soon as possible; the session ends in phase Aborted.
	// Once set it cannot be unset.
	// +optional
	Abort bool `json:"abort,omitempty"`

	// ttlSecondsAfterFinished deletes the session this many seconds after it reaches
	// Succeeded, Failed or Aborted. Unset keeps it forever.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// outputs are globs, relative to /workspace, of files stored as artifacts with the change
	// each time an input ends Succeeded (kubectl agent cp NAME:PATH). A file over 10 MiB, or
	// beyond 100 MiB or 1000 files in all, is skipped and named in status.changes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.startsWith('/') && !g.matches('(^|/)[.][.](/|$)'))",message="spec.outputs globs must be relative to /workspace and must not contain '..'"
	Outputs []string `json:"outputs,omitempty"`
}

// ModelSpec selects the LLM.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.model is immutable: create a new AgentSession to use another model"
// +kubebuilder:validation:XValidation:rule="self.provider in ['scripted', 'openai-compatible'] || has(self.apiKeySecretRef)",message="spec.model.apiKeySecretRef is required for providers anthropic, openai and gemini: reference a Secret key holding the API key"
// +kubebuilder:validation:XValidation:rule="self.provider != 'scripted' || has(self.scriptConfigMapRef)",message="spec.model.scriptConfigMapRef is required when provider is scripted"
// +kubebuilder:validation:XValidation:rule="self.provider == 'scripted' || !has(self.scriptConfigMapRef)",message="spec.model.scriptConfigMapRef is only allowed when provider is scripted"
// +kubebuilder:validation:XValidation:rule="self.provider != 'openai-compatible' || has(self.baseURL)",message="spec.model.baseURL is required when provider is openai-compatible"
type ModelSpec struct {
	// provider is the LLM API: anthropic, openai (Responses API), openai-compatible (Chat
	// Completions at baseURL), gemini, or scripted (replays spec.model.scriptConfigMapRef;
	// for demos and tests).
	// +required
	Provider Provider `json:"provider"`

	// name is the provider's model identifier, e.g. claude-sonnet-4-5 or gpt-5.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// baseURL overrides the provider's API endpoint (http or https). Required for
	// openai-compatible.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="spec.model.baseURL must be an http or https URL"
	BaseURL string `json:"baseURL,omitempty"`

	// apiKeySecretRef is a key of a Secret in the session's namespace holding the API key.
	// Only the operator reads it; it never enters the workspace pod, events or status.
	// Required for anthropic, openai and gemini; optional for openai-compatible.
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`

	// reasoningEffort is passed to reasoning models: low, medium or high.
	// +optional
	ReasoningEffort ReasoningEffort `json:"reasoningEffort,omitempty"`

	// scriptConfigMapRef names a ConfigMap key holding the script of the scripted provider.
	// Required iff provider is scripted.
	// +optional
	ScriptConfigMapRef *ConfigMapKeyRef `json:"scriptConfigMapRef,omitempty"`

	// contextWindow overrides the model's context window in tokens. By default the
	// operator's table of the models its profiles name is used (gpt-5*: 400000, claude*:
	// 200000, gemini*: 1048576). Compaction starts when a request would exceed 70% of the
	// window minus the system prompt and a 4096-token reserve.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	ContextWindow int32 `json:"contextWindow,omitempty"`

	// compactionModel is the model, of the same provider and credentials, that writes the
	// summaries replacing old history when the context fills up. Defaults to name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	CompactionModel string `json:"compactionModel,omitempty"`
}

// SkillsConfigMapRef names a ConfigMap of SKILL.md files.
type SkillsConfigMapRef struct {
	// name of the ConfigMap in the session's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// keys restricts the skills to these keys of the ConfigMap (default: every key).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Keys []string `json:"keys,omitempty"`
}

// SecretKeyRef selects a key of a Secret in the session's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// ConfigMapKeyRef selects a key of a ConfigMap in the session's namespace.
type ConfigMapKeyRef struct {
	// name of the ConfigMap.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the ConfigMap's data. Defaults to script.yaml.
	// +optional
	// +kubebuilder:default="script.yaml"
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// Limits bound the work of the agent. Zero or unset means the default.
//
// +kubebuilder:validation:XValidation:rule="!has(self.defaultCommandTimeout) || !has(self.maxCommandTimeout) || duration(self.maxCommandTimeout) >= duration(self.defaultCommandTimeout)",message="spec.limits.maxCommandTimeout must be at least spec.limits.defaultCommandTimeout"
type Limits struct {
	// maxTurns bounds the model calls of the whole session; reaching it fails the session
	// with reason TurnLimit. 0 means unlimited.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxTurns int32 `json:"maxTurns,omitempty"`

	// maxToolRoundsPerInput bounds the model/tool rounds for one input (the prompt or one
	// message). 0 means unlimited.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxToolRoundsPerInput int32 `json:"maxToolRoundsPerInput,omitempty"`

	// defaultCommandTimeout is the shell timeout when the model gives none, e.g. 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.limits.defaultCommandTimeout must be a positive duration such as 10s"
	DefaultCommandTimeout *metav1.Duration `json:"defaultCommandTimeout,omitempty"`

	// maxCommandTimeout caps the timeout the model may ask for, e.g. 10m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.limits.maxCommandTimeout must be a positive duration such as 10m"
	MaxCommandTimeout *metav1.Duration `json:"maxCommandTimeout,omitempty"`

	// deadline bounds the session's working time, e.g. 2h: the time during which an input
	// (the prompt, a message or a follow-up) is being processed, summed over all inputs
	// (status.workingTime). The clock runs from an input's USER_INPUT event to its SESSION_END,
	// including time the manager was down or the model unavailable in between; it stops while
	// the session is idle (Succeeded or AwaitingInput). When the working time reaches it, the
	// running input is stopped and the session fails with reason DeadlineExceeded. An idle
	// session is never failed by it.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.limits.deadline must be a positive duration such as 2h"
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// tokenBudget bounds the total (input + output) tokens of the session and all its
	// subagents together (status.treeTokens). The session whose budget a model call crosses
	// fails with reason TokenBudgetExceeded and its children stop; a child is created with
	// at most what its parent has left. The tree may overshoot by at most one in-flight model
	// call per running session. 0 means unlimited.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TokenBudget int64 `json:"tokenBudget,omitempty"`

	// costBudget bounds the cost of the session and all its subagents together
	// (status.treeCost), as a decimal in the currency of the operator's price table (USD by
	// default), e.g. "2.50". It works like tokenBudget, with reason CostBudgetExceeded. The
	// session's model must have a price in the table. Empty means unlimited.
	// +optional
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,6})?$`
	CostBudget string `json:"costBudget,omitempty"`

	// modelOutageTolerance is how long a session waits out a model provider that keeps
	// failing with transient errors (rate limits, 5xx, overload, network) after the client's
	// own retries, e.g. 1h (the default). Meanwhile the session keeps its phase, shows the
	// condition ModelAvailable=False/ModelUnavailable and retries the same model call with
	// backoff; once the tolerance is used up it fails with reason ModelUnavailable. Errors
	// that cannot pass (authentication, invalid request) fail the session at once.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="spec.limits.modelOutageTolerance must be a duration such as 1h (0s fails at the first outage)"
	ModelOutageTolerance *metav1.Duration `json:"modelOutageTolerance,omitempty"`
}

// ToolsSpec adjusts the tools of the provider profile.
type ToolsSpec struct {
	// profile overrides the tool profile chosen from the provider: openai, anthropic or gemini.
	// +optional
	// +kubebuilder:validation:Enum=openai;anthropic;gemini
	Profile string `json:"profile,omitempty"`

	// disabledTools removes tools by name, e.g. shell.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	DisabledTools []string `json:"disabledTools,omitempty"`

	// outputLimits overrides the character limit of a tool's output shown to the model,
	// keyed by tool name (the full output still goes to the event stream).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k] > 0)",message="spec.tools.outputLimits values must be positive character counts"
	OutputLimits map[string]int32 `json:"outputLimits,omitempty"`

	// policy allows or denies tool calls before they run (by tool name and, for shell, by
	// command line). Unset allows every call. Immutable.
	// +optional
	Policy *ToolPolicy `json:"policy,omitempty"`

	// webSearch offers the provider's own server-side web search (Anthropic's web search
	// tool, OpenAI Responses' web_search, Gemini's Google Search grounding): the provider
	// runs the searches, and their queries, results and the answer's citations are carried
	// in ASSISTANT_TEXT_END events. The openai-compatible provider has none. Off unless
	// enabled. Immutable. Child sessions inherit it.
	// +optional
	WebSearch *WebSearchSpec `json:"webSearch,omitempty"`

	// webFetch offers the web_fetch tool, which fetches a URL from the workspace pod (so the
	// pod's NetworkPolicy and spec.workspace.allowedEgressHosts apply) and returns the page as
	// Markdown-like text. Off unless enabled. Immutable. Child sessions inherit it.
	// +optional
	WebFetch *WebFetchSpec `json:"webFetch,omitempty"`

	// mcpServers are MCP servers connected when the session starts: remote ones (url,
	// streamable HTTP from the manager) and stdio ones (command, run inside the workspace pod
	// by the executor). Each allowed tool of a server is offered to the model as
	// mcp__<server>__<tool>. A remote server is tried until its timeout; one that still cannot
	// be reached, or a stdio server that cannot be started, leaves the session running without
	// its tools (reported as a WARNING event and in status.mcpServers). A remote one is tried
	// again in the background, and its tools join at the next turn once it answers.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	MCPServers []MCPServer `json:"mcpServers,omitempty"`

	// toolSearch defers the definitions of the session's MCP tools when there are many:
	// past either threshold the model sees only their names and one-line descriptions, and
	// the tool_search tool returns the full definitions it asks for, callable from its next
	// turn. Unset: on, past 40 tools or 32768 bytes of definitions.
	// +optional
	ToolSearch *ToolSearchSpec `json:"toolSearch,omitempty"`
}

// ToolSearchSpec says when MCP tools are deferred behind the tool_search tool.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.disabled) && self.disabled) || (!has(self.threshold) && !has(self.thresholdBytes))",message="spec.tools.toolSearch: set disabled or the thresholds, not both"
type ToolSearchSpec struct {
	// disabled sends every MCP tool's definition on every model request, however many
	// there are.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// threshold is the number of MCP tools above which they are deferred. Default 40.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Threshold *int32 `json:"threshold,omitempty"`

	// thresholdBytes is the size of the MCP tools' definitions (names, descriptions and
	// JSON Schemas) above which they are deferred, however few they are. Default 32768.
	// +optional
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=16777216
	ThresholdBytes *int32 `json:"thresholdBytes,omitempty"`
}

// WebSearchSpec configures the provider's server-side web search.
//
// +kubebuilder:validation:XValidation:rule="!has(self.allowedDomains) || !has(self.blockedDomains)",message="spec.tools.webSearch: set allowedDomains or blockedDomains, not both"
type WebSearchSpec struct {
	// enabled offers the provider's web search to the model. Default false.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// maxUses caps the searches of one model request (anthropic only). Unset: the
	// provider's default.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	MaxUses *int32 `json:"maxUses,omitempty"`

	// allowedDomains limits search results to these domains, e.g. go.dev (anthropic, openai).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[^\s/:]+(/[^\s]*)?$`
	AllowedDomains []string `json:"allowedDomains,omitempty"`

	// blockedDomains excludes these domains from search results (anthropic).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[^\s/:]+(/[^\s]*)?$`
	BlockedDomains []string `json:"blockedDomains,omitempty"`
}

// WebFetchSpec configures the web_fetch tool.
type WebFetchSpec struct {
	// enabled offers web_fetch to the model. Default false.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// maxCalls caps the web_fetch calls of the session; later calls return an error result.
	// Default 25.
	// +optional
	// +kubebuilder:default=25
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxCalls int32 `json:"maxCalls,omitempty"`

	// timeout bounds each fetch, redirects and body included, e.g. 30s. Default 30s, at most 5m.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('5m')",message="spec.tools.webFetch.timeout must be a positive duration of at most 5m, such as 30s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// maxBytes bounds the response body read by each fetch; the rest is not read and the
	// result says it was cut. Default 2097152 (2 MiB), at most 16 MiB.
	// +optional
	// +kubebuilder:default=2097152
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=16777216
	MaxBytes int64 `json:"maxBytes,omitempty"`

	// allowPrivateAddresses lets web_fetch reach loopback, private (RFC 1918, fc00::/7),
	// link-local (including 169.254.169.254) and other internal addresses. By default they are
	// refused unless the host, address or CIDR is listed in spec.workspace.allowedEgressHosts.
	// The workspace's NetworkPolicy applies either way.
	// +optional
	AllowPrivateAddresses bool `json:"allowPrivateAddresses,omitempty"`
}

// MCPServer is a remote MCP server reached over streamable HTTP from the manager.
// MCPServer is an MCP server: remote (url), reached over streamable HTTP from the manager,
// or stdio (command), run inside the workspace pod with its stdin and stdout relayed over
// the session's executor stream.
//
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.command)",message="spec.tools.mcpServers[]: set exactly one of url (a remote server the manager connects to) or command (a stdio server run in the workspace)"
// +kubebuilder:validation:XValidation:rule="!has(self.headersSecretRef) || has(self.url)",message="spec.tools.mcpServers[].headersSecretRef applies to remote servers (url) only; a stdio server (command) takes env"
// +kubebuilder:validation:XValidation:rule="(!has(self.env) && !has(self.workingDir)) || has(self.command)",message="spec.tools.mcpServers[].env and workingDir apply to stdio servers (command) only"
type MCPServer struct {
	// name identifies the server in tool names (mcp__<name>__<tool>): lowercase letters,
	// digits and '-', starting and ending with a letter or digit.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// url is a remote server's streamable HTTP endpoint (http or https); a server that refuses
	// streamable HTTP is tried as a 2024-11-05 HTTP+SSE server at the same URL. Exactly one of
	// url and command is set.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="spec.tools.mcpServers[].url must be an http or https URL"
	URL string `json:"url,omitempty"`

	// command is a stdio server's argv (no shell), run inside the workspace pod by the
	// executor, e.g. ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]. It sees
	// the workspace files and runs as the workspace's commands do; it lives as long as the
	// session's runner and is stopped with its process group. Exactly one of url and
	// command is set.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command,omitempty"`

	// env are environment variables of a stdio server, added to the executor's filtered
	// environment. Plain values only: no Secret of the manager reaches the workspace.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []MCPEnvVar `json:"env,omitempty"`

	// workingDir is a stdio server's working directory, relative to the session's
	// working directory in the workspace (default: the session's working directory).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	WorkingDir string `json:"workingDir,omitempty"`

	// headersSecretRef names a Secret of the session's namespace whose keys and values are
	// sent as HTTP headers on every request to the server (e.g. Authorization). Only the
	// manager reads it: the values never reach the workspace pod, events, status or logs.
	// The Secret must be labelled agent-operator.dev/mcp-headers: "true"; its optional
	// annotation agent-operator.dev/allowed-base-urls limits the URLs it may be sent to.
	// +optional
	HeadersSecretRef *MCPHeadersSecretRef `json:"headersSecretRef,omitempty"`

	// timeout bounds connecting to (or starting) the server and each tool call, e.g. 30s.
	// Default 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.tools.mcpServers[].timeout must be a positive duration such as 30s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// allowedTools are path.Match wildcards over the server's tool names (e.g. "get_*");
	// when set, only matching tools are offered. Empty offers every tool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	AllowedTools []string `json:"allowedTools,omitempty"`

	// deniedTools are path.Match wildcards over the server's tool names; a matching tool
	// is never offered, even when allowedTools matches it too.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	DeniedTools []string `json:"deniedTools,omitempty"`
}

// MCPEnvVar is an environment variable of a stdio MCP server.
type MCPEnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// value of the variable.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value,omitempty"`
}

// MCPHeadersSecretRef names the Secret holding an MCP server's HTTP headers.
type MCPHeadersSecretRef struct {
	// name of the Secret in the session's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// WorkspaceSpec describes the workspace pod.
//
// +kubebuilder:validation:XValidation:rule="has(self.image) == has(oldSelf.image) && (!has(self.image) || self.image == oldSelf.image)",message="spec.workspace.image is immutable"
type WorkspaceSpec struct {
	// image is the container image the tools run in; any image works (the executor is copied
	// in). Defaults to the operator's workspace image. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// resources of the workspace container. Defaults to requests cpu 100m / memory 256Mi and
	// limits cpu 2 / memory 2Gi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// volume backs /workspace: an emptyDir (default) or a PersistentVolumeClaim. With a PVC
	// a lost pod is recreated and the session resumes (unless the claim the operator created
	// was deleted too: then it fails with WorkspaceLost); with an emptyDir it fails. Immutable.
	// +optional
	// +kubebuilder:default={}
	Volume WorkspaceVolume `json:"volume,omitempty,omitzero"`

	// retainAfterSuccess is how long the workspace pod is kept once the session is idle
	// (Succeeded, or AwaitingInput), e.g. 10m (the default); 0s deletes it as soon as the
	// session goes idle. A message that arrives within that time runs in the same pod; later
	// ones start a new pod: on the same claim with a persistentVolumeClaim volume, with an
	// empty workspace with an emptyDir (condition WorkspaceReady=False/WorkspaceReleased says
	// which). Nothing else is held for an idle session: no goroutine, stream or history.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="spec.workspace.retainAfterSuccess must be a duration such as 10m, or 0s"
	RetainAfterSuccess *metav1.Duration `json:"retainAfterSuccess,omitempty"`

	// git clones a repository into /workspace before the agent starts.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// env adds environment variables to the workspace container. A valueFrom.secretKeyRef
	// must name a Secret labelled agent-operator.dev/workspace-secret: "true" (the workspace,
	// its code and the model can read it); otherwise the session fails with ConfigError.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []corev1.EnvVar `json:"env,omitempty"`

	// runtimeClassName runs the pod with a sandboxing runtime such as gVisor or Kata.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// nodeSelector constrains the nodes the pod may run on.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the workspace pod.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// allowedEgressHosts lists what the workspace pod may reach besides DNS, each optionally
	// with :port (TCP): an IPv4 address, an IPv4 CIDR such as 10.0.0.0/8, or a host name.
	// The operator enforces it with a NetworkPolicy that denies everything else. NetworkPolicy
	// matches addresses, not names: host names (and the host of workspace.git.repository)
	// are resolved by the operator when it creates the pod, and their addresses at that
	// moment are allowed; *.domain entries cannot be resolved and allow nothing. The
	// Kubernetes API server's addresses are never allowed, whatever is listed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^((\*\.)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?|[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2})(:[0-9]{1,5})?$`
	// +kubebuilder:validation:XValidation:rule="self.all(h, !h.contains('/') || isCIDR(h.split(':')[0]))",message="spec.workspace.allowedEgressHosts: a CIDR entry must be a valid IPv4 prefix such as 10.0.0.0/8"
	// +kubebuilder:validation:XValidation:rule="self.all(h, !h.contains(':') || (int(h.split(':')[1]) >= 1 && int(h.split(':')[1]) <= 65535))",message="spec.workspace.allowedEgressHosts: a port must be between 1 and 65535"
	AllowedEgressHosts []string `json:"allowedEgressHosts,omitempty"`
}

// WorkspaceVolume is where /workspace lives. At most one of emptyDir and
// persistentVolumeClaim may be set; neither means an emptyDir.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workspace.volume is immutable"
// +kubebuilder:validation:XValidation:rule="!(has(self.emptyDir) && has(self.persistentVolumeClaim))",message="spec.workspace.volume: set either emptyDir or persistentVolumeClaim, not both"
type WorkspaceVolume struct {
	// emptyDir keeps /workspace on the node for the life of the pod.
	// +optional
	EmptyDir *EmptyDirVolume `json:"emptyDir,omitempty"`
	// persistentVolumeClaim keeps /workspace in a PVC, so a lost pod can be recreated.
	// +optional
	PersistentVolumeClaim *PVCVolume `json:"persistentVolumeClaim,omitempty"`
}

// EmptyDirVolume is an emptyDir /workspace.
type EmptyDirVolume struct {
	// sizeLimit bounds the volume, e.g. 10Gi.
	// +optional
	SizeLimit *resource.Quantity `json:"sizeLimit,omitempty"`
}

// PVCVolume is a PersistentVolumeClaim /workspace: an existing claim (claimName) or one the
// operator creates and owns (size).
//
// +kubebuilder:validation:XValidation:rule="has(self.claimName) != has(self.size)",message="spec.workspace.volume.persistentVolumeClaim: set claimName (existing claim) or size (new claim), exactly one"
type PVCVolume struct {
	// claimName is an existing claim in the session's namespace, labelled
	// agent-operator.dev/workspace-volume: "true"; otherwise the session fails with ConfigError.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`
	// size of a claim created for this session and deleted with it, e.g. 10Gi.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
	// storageClassName of a created claim; empty uses the cluster default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// GitSource is a repository cloned into /workspace by an init container.
type GitSource struct {
	// repository URL (https://, ssh:// or git@host:path).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://') || self.startsWith('ssh://') || self.matches('^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:.+$')",message="spec.workspace.git.repository must be an https://, http://, ssh:// or user@host:path URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z]+://-')",message="spec.workspace.git.repository must not name a host starting with '-': it would be read as an option"
	Repository string `json:"repository"`
	// ref is a branch, tag or commit to check out. Empty means the default branch.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="spec.workspace.git.ref must not start with '-': it would be read as an option of git checkout"
	Ref string `json:"ref,omitempty"`
	// credentialsSecretRef names a Secret mounted only into the clone init container. Keys:
	// username and password (https) or ssh-privatekey and optionally known_hosts (ssh).
	// It must be labelled agent-operator.dev/git-credentials: "true"; otherwise the session
	// fails with ConfigError.
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
	// push commits the session's change on a branch and pushes it from the operator when
	// the session reaches Succeeded (and after each follow-up that ends Succeeded). Unset:
	// the change is committed on agent/<session-name> in the workspace and stored, not pushed.
	// +optional
	Push *GitPush `json:"push,omitempty"`
}

// SubagentsSpec bounds the child sessions of this session.
type SubagentsSpec struct {
	// maxDepth is the deepest nesting allowed below the top-level session (depth 0). Default 1:
	// children, no grandchildren. 0 disables subagents.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	MaxDepth *int32 `json:"maxDepth,omitempty"`
	// maxChildren bounds the children alive at once. Default 4.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	MaxChildren *int32 `json:"maxChildren,omitempty"`
	// workspace: shared (default) runs children in this session's pod, isolated gives each
	// its own pod.
	// +optional
	Workspace SubagentWorkspaceMode `json:"workspace,omitempty"`
	// workingDir of children inside a shared workspace, relative to /workspace.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="spec.subagents.workingDir must be relative to /workspace and must not contain '..'"
	WorkingDir string `json:"workingDir,omitempty"`
	// models the spawn_agent tool may choose for a child (same provider, credentials and
	// endpoint as this session). Unset allows only this session's own model.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Models []string `json:"models,omitempty"`
}

// ParentReference names the parent session in the same namespace.
type ParentReference struct {
	// name of the parent AgentSession.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the parent AgentSession.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`
}

// Message is an input for the agent appended after creation. Messages cannot be edited.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.messages entries are immutable: append a new message with a new name instead of editing one"
type Message struct {
	// name identifies the message; unique within the session (a DNS label).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// kind is steer (injected into the running loop) or followUp (a new input after the
	// current one finishes). Default followUp.
	// +optional
	// +kubebuilder:default=followUp
	Kind MessageKind `json:"kind,omitempty"`
	// text of the message.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	Text string `json:"text"`
}

// AgentSessionStatus is the observed state of an AgentSession.
type AgentSessionStatus struct {
	// phase is a summary of the lifecycle; conditions carry the details.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// conditions: Ready, WorkspaceReady, Completed, JournalAvailable, ModelAvailable,
	// WorkspaceAvailable, HistoryAvailable, ChangesRecorded, ChangesPushed and Accepted (only on
	// a session no install took up in time, see the ClassNotServed reason).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// podName is the workspace pod.
	// +optional
	PodName string `json:"podName,omitempty"`

	// turns is the number of model turns so far.
	// +optional
	Turns int32 `json:"turns,omitempty"`

	// toolCalls is the number of tool calls completed so far.
	// +optional
	ToolCalls int32 `json:"toolCalls,omitempty"`

	// usage is the token usage so far.
	// +optional
	Usage Usage `json:"usage,omitempty,omitzero"`

	// result is the agent's last answer, cut at 16 KiB (see resultTruncated). The full
	// text is in the event stream.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Result string `json:"result,omitempty"`

	// resultTruncated is set when result was cut.
	// +optional
	ResultTruncated bool `json:"resultTruncated,omitempty"`

	// error explains a Failed phase.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Error string `json:"error,omitempty"`

	// eventsSubject is the NATS subject filter of this session's events, e.g.
	// agents.default.my-session.>.
	// +optional
	EventsSubject string `json:"eventsSubject,omitempty"`

	// lastEventSequence is the sequence number of the last event reflected in this status.
	// +optional
	LastEventSequence int64 `json:"lastEventSequence,omitempty"`

	// messagesDelivered lists the names of spec.messages already given to the agent; each is
	// delivered exactly once.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	MessagesDelivered []string `json:"messagesDelivered,omitempty"`

	// children are the child sessions spawned by this session, in name order: at most 256
	// (MaxListedChildren), every child that has not ended first, then the newest ended ones.
	// childrenSummary counts them all and carries the tree figures of those left out.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Children []ChildStatus `json:"children,omitempty"`
	// childrenSummary counts the children by phase, listed in status.children or not, and
	// sums the treeTokens and treeCost of the ones status.children leaves out. Unset without
	// children.
	// +optional
	ChildrenSummary *ChildrenSummary `json:"childrenSummary,omitempty"`
	// treeTokens is usage.total of this session plus the treeTokens of its children: what the
	// whole tree of subagents below (and including) this session has used so far.
	// +optional
	TreeTokens int64 `json:"treeTokens,omitempty"`
	// cost is what this session's model calls cost, a decimal in status.currency, from the
	// operator's price table. Unset when the table has no price for the model.
	// +optional
	Cost string `json:"cost,omitempty"`
	// treeCost is cost plus the treeCost of the children.
	// +optional
	TreeCost string `json:"treeCost,omitempty"`
	// currency of cost and treeCost, e.g. USD.
	// +optional
	Currency string `json:"currency,omitempty"`

	// workspaceStartRetries is how many times in a row a workspace pod was replaced because
	// the container runtime could not start one of its containers (reason StartError, e.g.
	// "failed to create containerd task" on a saturated node); 0 again once a pod is Ready.
	// At most 3, after which the session fails with WorkspaceInitFailed. A pod is replaced only while that loses no work:
	// before the loop started, or with the workspace on a persistentVolumeClaim.
	// +optional
	WorkspaceStartRetries int32 `json:"workspaceStartRetries,omitempty"`

	// startTime is when the agent loop first started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the session reached Succeeded, Failed or Aborted.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// idleSince is when the session last became idle (Succeeded or AwaitingInput); unset
	// while an input runs. spec.workspace.retainAfterSuccess counts from it.
	// +optional
	IdleSince *metav1.Time `json:"idleSince,omitempty"`

	// owner is the operator instance (<install>/<pod>) that drives the session, or drove it
	// last; its claim is the Lease agentsession-<uid> in the session's namespace.
	// +optional
	Owner string `json:"owner,omitempty"`

	// workingTime is the time inputs have been processed, summed over all inputs, as of the
	// last status update: what spec.limits.deadline bounds.
	// +optional
	WorkingTime *metav1.Duration `json:"workingTime,omitempty"`

	// changes is what the session changed in its workspace, recorded each time an input ends
	// Succeeded (kubectl agent diff shows the full patch).
	// +optional
	Changes *Changes `json:"changes,omitempty"`

	// context is the context-window accounting of the last model call.
	// +optional
	Context *ContextStatus `json:"context,omitempty"`

	// plan is the agent's current plan, as it last wrote it with the todo tool (at most 30
	// steps).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=30
	Plan []PlanStep `json:"plan,omitempty"`

	// mcpServers says, for each of spec.tools.mcpServers, whether the runner connected it and
	// how many of its tools the agent got, as of the runner's last start, the server's late
	// connection or its last tool-list change.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	MCPServers []MCPServerStatus `json:"mcpServers,omitempty"`
}

// MCPServerStatus is the state of one MCP server of a session.
type MCPServerStatus struct {
	// name of the server (spec.tools.mcpServers[].name).
	// +required
	Name string `json:"name"`
	// connected is true when the server answered and listed its tools.
	Connected bool `json:"connected"`
	// tools is how many of its tools the agent can call (after allowedTools/deniedTools).
	// +optional
	Tools int32 `json:"tools,omitempty"`
	// message says why the server is not connected, or which of its tools were left out.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ContextStatus is the context-window accounting of a session.
type ContextStatus struct {
	// window is the model's context window in tokens (0 when unknown).
	// +optional
	Window int64 `json:"window,omitempty"`
	// lastRequestTokens is the size of the last request: the input tokens the provider
	// reported, or the operator's estimate when it reported none.
	// +optional
	LastRequestTokens int64 `json:"lastRequestTokens,omitempty"`
	// compactions is how many times old history was replaced by a summary.
	// +optional
	Compactions int32 `json:"compactions,omitempty"`
}

// PlanStepStatus is the state of a plan step.
// +kubebuilder:validation:Enum=pending;in_progress;completed
type PlanStepStatus string

// Plan step states.
const (
	PlanStepPending    PlanStepStatus = "pending"
	PlanStepInProgress PlanStepStatus = "in_progress"
	PlanStepCompleted  PlanStepStatus = "completed"
)

// MaxPlanSteps bounds status.plan.
const MaxPlanSteps = 30

// PlanStep is one step of the agent's plan.
type PlanStep struct {
	// content is the step, as the agent wrote it.
	// +required
	// +kubebuilder:validation:MaxLength=200
	Content string `json:"content"`
	// status of the step.
	// +required
	Status PlanStepStatus `json:"status"`
}

// Usage is token accounting. input includes cached input; output includes reasoning.
type Usage struct {
	// input tokens.
	// +optional
	Input int64 `json:"input,omitempty"`
	// output tokens.
	// +optional
	Output int64 `json:"output,omitempty"`
	// reasoning tokens (part of output).
	// +optional
	Reasoning int64 `json:"reasoning,omitempty"`
	// cacheRead tokens (part of input).
	// +optional
	CacheRead int64 `json:"cacheRead,omitempty"`
	// cacheWrite tokens (part of input).
	// +optional
	CacheWrite int64 `json:"cacheWrite,omitempty"`
	// total is input + output.
	// +optional
	Total int64 `json:"total,omitempty"`
}

// MaxListedChildren bounds status.children: a session with more children
// lists every child that has not ended and the newest ended ones, and counts
// the rest in status.childrenSummary. It is spec.subagents.maxChildren's
// maximum, so every live child is always listed.
const MaxListedChildren = 256

// ChildrenSummary counts a session's children.
type ChildrenSummary struct {
	// total is how many children the session has.
	// +optional
	Total int32 `json:"total,omitempty"`
	// phases counts the children by phase; a child without a phase yet counts as Pending.
	// +optional
	Phases map[string]int32 `json:"phases,omitempty"`
	// omitted is how many ended children status.children leaves out (the oldest first).
	// +optional
	Omitted int32 `json:"omitted,omitempty"`
	// omittedTreeTokens is the sum of the treeTokens of the omitted children; status.treeTokens
	// counts it.
	// +optional
	OmittedTreeTokens int64 `json:"omittedTreeTokens,omitempty"`
	// omittedTreeCost is the sum of the treeCost of the omitted children; status.treeCost counts it.
	// +optional
	OmittedTreeCost string `json:"omittedTreeCost,omitempty"`
}

// ChildStatus summarises a child session.
type ChildStatus struct {
	// name of the child AgentSession.
	// +required
	Name string `json:"name"`
	// phase of the child.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// treeTokens is the child's status.treeTokens: its tokens and its descendants'.
	// +optional
	TreeTokens int64 `json:"treeTokens,omitempty"`
	// treeCost is the child's status.treeCost.
	// +optional
	TreeCost string `json:"treeCost,omitempty"`
}

// +kubebuilder:object:root=true

// AgentSessionList is a list of AgentSessions.
type AgentSessionList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the AgentSessions.
	Items []AgentSession `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentSession{}, &AgentSessionList{})
}
