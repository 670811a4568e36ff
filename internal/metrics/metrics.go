// Package metrics exposes Prometheus metrics of the sessions a manager runs:
// tokens and cost, model calls, tool calls, LLM errors and retries, turns,
// sessions by phase and how they ended, and the manager's own plumbing
// (exec-stream reconnects, journal publishing, warm pools).
//
// A Recorder is registered on the manager's registry (controller-runtime's
// metrics.Registry, served on /metrics). It observes the live events of
// every session as a runner.Observer; the manager reports the rest through
// small typed methods, so callers never touch Prometheus types.
//
// Labels are bounded: never a session's name or UID; tool names only from a
// fixed list (others are "other"); providers, error kinds, phases and
// reasons from their enums. Namespaces are kept as they are; model names
// too, up to MaxModelLabels of them per manager (later ones are "other"):
// series are never deleted, so sessions naming ever new models (any name
// an OpenAI-compatible server answers to) would grow them for the
// manager's life.
// docs/observability.md lists every metric.
package metrics

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// prefix is the common prefix of every metric name.
const prefix = "agent_operator_"

// DefaultMaxTrackedSessions bounds the per-session state of a Recorder
// (sessions with a model call in flight, or paused on a model outage).
const DefaultMaxTrackedSessions = 10000

// Outcome label values.
const (
	outcomeOK    = "ok"
	outcomeError = "error"
)

// Recorder records metrics. It is safe for concurrent use.
type Recorder struct {
	reg    prometheus.Registerer
	prices *pricing.Table
	now    func() time.Time

	tokens         *prometheus.CounterVec
	cost           *costCounter
	unpriced       *prometheus.CounterVec
	llmCalls       *prometheus.CounterVec
	llmLatency     *prometheus.HistogramVec
	llmErrors      *prometheus.CounterVec
	llmRetries     *prometheus.CounterVec
	clientRetries  *prometheus.CounterVec
	turns          *prometheus.CounterVec
	toolCalls      *prometheus.CounterVec
	toolLatency    *prometheus.HistogramVec
	ended          *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	execReconnects *prometheus.CounterVec
	publish        *prometheus.HistogramVec
	journalUp      prometheus.Gauge
	warmPods       *prometheus.GaugeVec
	warmClaims     *prometheus.CounterVec
	startStages    *prometheus.HistogramVec

	mu         sync.Mutex
	calls      map[string]*callState // by session, see observe.go
	maxTracked int
	namespaces map[string]bool // namespaces whose ended counters exist
	models     map[string]bool // provider and model label pairs in use (modelLabel)
}

// MaxModelLabels bounds the model label values of a manager's metrics: the
// first this many provider and model pairs seen keep their model name,
// later ones are labelled "other".
const MaxModelLabels = 64

// New returns a Recorder whose metrics are registered on reg. prices turns
// usage into cost (nil: pricing.Default()); its currency is stated in the
// cost metric's help.
func New(reg prometheus.Registerer, prices *pricing.Table) (*Recorder, error) {
	if reg == nil {
		return nil, errors.New("new metrics recorder: a registerer is required")
	}
	if prices == nil {
		prices = pricing.Default()
	}
	r := &Recorder{
		reg: reg, prices: prices, now: time.Now,
		calls: map[string]*callState{}, maxTracked: DefaultMaxTrackedSessions, namespaces: map[string]bool{}, models: map[string]bool{},

		tokens: counterVec("llm_tokens_total",
			"Tokens of model calls by namespace, provider, model and kind. input includes cache_read and cache_write; output includes reasoning.",
			"namespace", "provider", "model", "kind"),
		cost: newCostCounter(prices.Currency()),
		unpriced: counterVec("llm_unpriced_calls_total",
			"Model calls of models the price table has no price for (their cost is not counted).",
			"provider", "model"),
		llmCalls: counterVec("llm_calls_total",
			"Model calls by provider, model and outcome (ok, or error when the call failed after the client's retries).",
			"provider", "model", "outcome"),
		llmLatency: histogramVec("llm_call_duration_seconds",
			"Duration of successful model calls, from the request to the complete answer (ASSISTANT_TEXT_START to ASSISTANT_TEXT_END), retries within the call included.",
			[]float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}, "provider", "model"),
		llmErrors: counterVec("llm_errors_total",
			"Model calls that failed after the client's retries (ERROR events), by provider and error kind.",
			"provider", "kind"),
		llmRetries: counterVec("llm_retries_total",
			"Model calls a session made again, by provider and kind: stream_restart when a stream was cut after part of the answer had streamed, or the error kind after which a session paused on a model outage resumed.",
			"provider", "kind"),
		clientRetries: counterVec("llm_client_retries_total",
			"Attempts the LLM client made again after a retryable error (rate limit, server, network), by provider and error kind.",
			"provider", "kind"),
		turns: counterVec("turns_total",
			"Turns (model calls answered) by namespace.",
			"namespace"),
		toolCalls: counterVec("tool_calls_total",
			"Tool calls by tool and outcome (ok or error). Tools outside the built-in set are tool=\"other\".",
			"tool", "outcome"),
		toolLatency: histogramVec("tool_call_duration_seconds",
			"Duration of tool calls by tool and transport (exec: in the workspace pod over the exec stream; local: in the manager; other: tools outside the built-in set).",
			[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}, "tool", "transport"),
		ended: counterVec("sessions_ended_total",
			"Sessions that ended (reached Succeeded, Failed or Aborted) by namespace, phase and reason.",
			"namespace", "phase", "reason"),
		duration: histogramVec("session_duration_seconds",
			"Time from a session's creation to its end, by namespace and the phase it ended in.",
			[]float64{10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400}, "namespace", "phase"),
		execReconnects: counterVec("exec_stream_reconnects_total",
			"Exec streams to workspace pods opened again after the previous one broke, by the pod's namespace.",
			"namespace"),
		publish: histogramVec("journal_publish_duration_seconds",
			"Duration of publishing session events to the journal (NATS JetStream), by outcome.",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, "outcome"),
		journalUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: prefix + "journal_available",
			Help: "1 while the journal (NATS JetStream) accepts events, 0 while it is unavailable."}),
		warmPods: gaugeVec("warm_pool_pods",
			"Unclaimed warm-pool workspace pods by namespace.",
			"namespace"),
		warmClaims: counterVec("warm_pool_claims_total",
			"Sessions that could start in a warm-pool pod, by namespace and result (claimed, or miss when no pod was free).",
			"namespace", "result"),
		startStages: histogramVec("session_start_stage_seconds",
			"Duration of the stages of a session's start, by stage: runner_claim (runner picks the session up until it holds its claim), build (LLM client, tools and loop built), pod_check and exec_handshake (opening the workspace pod's exec stream) or spare (taking over the stream the warm pool kept open to the pod instead), first_tool_call (the first tool call), runner_to_first_tool (runner pickup to the first tool result).",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}, "stage"),
	}
	for _, c := range []prometheus.Collector{
		r.tokens, r.cost, r.unpriced, r.llmCalls, r.llmLatency, r.llmErrors, r.llmRetries, r.clientRetries,
		r.turns, r.toolCalls, r.toolLatency, r.ended, r.duration, r.execReconnects, r.publish,
		r.journalUp, r.warmPods, r.warmClaims, r.startStages,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return r, nil
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + name, Help: help, Buckets: buckets}, labels)
}

// SessionEnded records that a session of namespace ended in phase
// (Succeeded, Failed or Aborted) with reason, duration after it was
// created. Call it once per end: when the status update that moves the
// session into a final phase succeeds. Reasons outside the API's set are
// labelled "other".
func (r *Recorder) SessionEnded(namespace, phase, reason string, duration time.Duration) {
	r.seeNamespace(namespace)
	p := phaseLabel(phase)
	r.ended.WithLabelValues(namespace, p, reasonLabel(reason)).Inc()
	r.duration.WithLabelValues(namespace, p).Observe(max(duration, 0).Seconds())
}

// seeNamespace creates the ended counters of a namespace at zero, once, so
// that a namespace's first failure shows in increase() and rate().
func (r *Recorder) seeNamespace(namespace string) {
	r.mu.Lock()
	seen := r.namespaces[namespace]
	r.namespaces[namespace] = true
	r.mu.Unlock()
	if seen {
		return
	}
	for _, o := range outcomes {
		r.ended.WithLabelValues(namespace, o.phase, o.reason)
	}
}

// LLMRetryHook returns a function for llm.RetryPolicy.OnRetry that counts
// the client's retries of provider's calls
// (agent_operator_llm_client_retries_total).
func (r *Recorder) LLMRetryHook(provider string) func(attempt int, err error, wait time.Duration) {
	p := providerLabel(provider)
	return func(_ int, err error, _ time.Duration) {
		r.clientRetries.WithLabelValues(p, errorKindLabel(string(llm.KindOf(err)))).Inc()
	}
}

// ExecStreamReconnected counts an exec stream to a workspace pod in
// namespace opened again after the previous one broke.
func (r *Recorder) ExecStreamReconnected(namespace string) {
	r.execReconnects.WithLabelValues(namespace).Inc()
}

// ObserveJournalPublish records one publish to the journal that took d and
// failed with err (nil: succeeded).
func (r *Recorder) ObserveJournalPublish(d time.Duration, err error) {
	outcome := outcomeOK
	if err != nil {
		outcome = outcomeError
	}
	r.publish.WithLabelValues(outcome).Observe(max(d, 0).Seconds())
}

// SetJournalAvailable says whether the journal accepts events.
func (r *Recorder) SetJournalAvailable(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	r.journalUp.Set(v)
}

// SetWarmPoolPods sets the number of unclaimed warm-pool pods in namespace
// (the sum over the namespace's pools).
func (r *Recorder) SetWarmPoolPods(namespace string, n int) {
	r.warmPods.WithLabelValues(namespace).Set(float64(n))
}

// WarmPoolClaim records a session of namespace that could start in a
// warm-pool pod: claimed is whether it got one.
func (r *Recorder) WarmPoolClaim(namespace string, claimed bool) {
	result := "miss"
	if claimed {
		result = "claimed"
	}
	r.warmClaims.WithLabelValues(namespace, result).Inc()
}

// Start stages: the stage label values of session_start_stage_seconds.
const (
	StageRunnerClaim       = "runner_claim"
	StageBuild             = "build"
	StagePodCheck          = "pod_check"
	StageExecHandshake     = "exec_handshake"
	StageSpare             = "spare"
	StageFirstToolCall     = "first_tool_call"
	StageRunnerToFirstTool = "runner_to_first_tool"
)

// startStages are the stage label values; any other stage is "other".
var startStages = []string{StageRunnerClaim, StageBuild, StagePodCheck, StageExecHandshake,
	StageSpare, StageFirstToolCall, StageRunnerToFirstTool}

// SessionStartStage records that stage of a session's start took d
// (runner.Options.StartStage, k8senv.Config.OnOpen).
func (r *Recorder) SessionStartStage(stage string, d time.Duration) {
	if !slices.Contains(startStages, stage) {
		stage = other
	}
	r.startStages.WithLabelValues(stage).Observe(max(d, 0).Seconds())
}
