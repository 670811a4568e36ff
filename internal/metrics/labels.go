package metrics

import (
	"slices"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// other is the label value of everything outside a bounded set.
const other = "other"

// Transports of tool calls.
const (
	// TransportExec is a tool the runner runs in the workspace pod over
	// the exec stream (internal/k8senv).
	TransportExec = "exec"
	// TransportLocal is a tool the manager answers in-process.
	TransportLocal = "local"
)

// toolTransports are the tools whose name is used as a label, with how they
// run. Any other tool (an MCP server's, a future one) is labelled
// tool="other", transport="other", so a model or a server cannot grow the
// number of series.
var toolTransports = map[string]string{
	// internal/loop/builtin: files, search and shell, in the workspace pod.
	"read_file":       TransportExec,
	"read_many_files": TransportExec,
	"write_file":      TransportExec,
	"edit_file":       TransportExec,
	"apply_patch":     TransportExec,
	"list_dir":        TransportExec,
	"grep":            TransportExec,
	"glob":            TransportExec,
	"shell":           TransportExec,
	// Subagent tools: the runner creates and watches child AgentSessions.
	"spawn_agent": TransportLocal,
	"send_input":  TransportLocal,
	"wait":        TransportLocal,
	"close_agent": TransportLocal,
	// The session's own tools (internal/loop/sessiontools.go).
	loop.TodoToolName:  TransportLocal,
	loop.SkillToolName: TransportLocal,
}

// toolLabels returns the tool and transport labels of a tool name.
func toolLabels(name string) (tool, transport string) {
	if t, ok := toolTransports[name]; ok {
		return name, t
	}
	return other, other
}

// providers are the provider label values: the CRD's enum.
var providers = []string{
	string(agentsv1.ProviderAnthropic), string(agentsv1.ProviderOpenAI), string(agentsv1.ProviderOpenAICompatible),
	string(agentsv1.ProviderGemini), string(agentsv1.ProviderScripted),
}

func providerLabel(p string) string { return bounded(p, providers) }

// errorKinds are the kind label values of LLM errors (llm.ErrorKind).
var errorKinds = []string{
	string(llm.KindAuthentication), string(llm.KindPermission), string(llm.KindRateLimit), string(llm.KindServer),
	string(llm.KindContextLength), string(llm.KindNetwork), string(llm.KindInvalidRequest), string(llm.KindUnknown),
}

func errorKindLabel(k string) string { return bounded(k, errorKinds) }

// retryableKinds are the error kinds after which a session that pauses on a
// model outage calls the model again (llm.Error.Retryable).
var retryableKinds = []string{string(llm.KindRateLimit), string(llm.KindServer), string(llm.KindNetwork)}

// KindStreamRestart is the retry kind of a model stream cut after part of
// the answer had streamed and made again (the WARNING
// loop.StreamRestartWarning).
const KindStreamRestart = "stream_restart"

// phases are the phase label values.
var phases = []string{
	string(agentsv1.PhasePending), string(agentsv1.PhaseProvisioning), string(agentsv1.PhaseRunning),
	string(agentsv1.PhaseAwaitingInput), string(agentsv1.PhaseSucceeded), string(agentsv1.PhaseFailed),
	string(agentsv1.PhaseAborted),
}

// phaseLabel bounds a phase; an empty phase is Pending, as the controller
// reports it.
func phaseLabel(p string) string {
	if p == "" {
		return string(agentsv1.PhasePending)
	}
	return bounded(p, phases)
}

// outcomes are the (phase, reason) pairs a session ends with: the label
// values of sessions_ended_total, created at zero for every namespace the
// recorder sees so that increase() and rate() see a session's first end.
var outcomes = []struct{ phase, reason string }{
	{string(agentsv1.PhaseSucceeded), agentsv1.ReasonSucceeded},
	{string(agentsv1.PhaseAborted), agentsv1.ReasonAborted},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonFailed},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonDeadlineExceeded},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonTokenBudgetExceeded},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonCostBudgetExceeded},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonTurnLimit},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonConfigError},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonModelUnavailable},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonWorkspaceLost},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonWorkspaceOOMKilled},
	{string(agentsv1.PhaseFailed), agentsv1.ReasonHistoryExpired},
}

// reasonLabel bounds the reason a session ended with.
func reasonLabel(r string) string {
	for _, o := range outcomes {
		if o.reason == r {
			return r
		}
	}
	return other
}

func bounded(v string, known []string) string {
	if slices.Contains(known, v) {
		return v
	}
	return other
}
