package metrics

import (
	"slices"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/runner"
)

var _ runner.Observer = (*Recorder)(nil)

// callState is what a Recorder keeps about one session between events: the
// model call in flight, or the error a session paused on. It exists only
// while one of them does, and SESSION_END drops it.
type callState struct {
	// start is the ASSISTANT_TEXT_START of the call in flight (zero: none).
	start time.Time
	// paused is the kind of the retryable ERROR that ended the last call:
	// the session's next call repeats it.
	paused string
	// touched is when the state last changed, for eviction.
	touched time.Time
}

// Observe implements runner.Observer: it records the metrics of one live
// event of session s.
func (r *Recorder) Observe(s runner.SessionInfo, ev loop.Event) {
	if ev.Kind == loop.EventAssistantTextDelta || ev.Kind == loop.EventToolCallOutputDelta {
		return // the hot path: nothing to record
	}
	r.seeNamespace(s.Namespace)
	provider := providerLabel(s.Provider)
	switch ev.Kind {
	case loop.EventAssistantTextStart:
		r.callStarted(s, provider, eventTime(r, ev))
	case loop.EventAssistantTextEnd:
		r.callEnded(s, provider, eventTime(r, ev), ev.Data.Usage)
	case loop.EventError:
		r.callFailed(s, provider, ev.Data.ErrorKind)
	case loop.EventWarning:
		if ev.Data.Message == loop.StreamRestartWarning {
			r.llmRetries.WithLabelValues(provider, KindStreamRestart).Inc()
		}
	case loop.EventToolCallEnd:
		tool, transport := toolLabels(ev.Data.ToolName)
		outcome := outcomeOK
		if ev.Data.IsError {
			outcome = outcomeError
		}
		r.toolCalls.WithLabelValues(tool, outcome).Inc()
		r.toolLatency.WithLabelValues(tool, transport).Observe(float64(max(ev.Data.DurationMs, 0)) / 1000)
	case loop.EventSessionEnd:
		r.mu.Lock()
		delete(r.calls, sessionKey(s))
		r.mu.Unlock()
	}
}

// callStarted notes the start of a model call. A second START while a call
// is in flight is the same call made again after its stream was cut; a
// START after a retryable error is the resumed call of a paused session.
func (r *Recorder) callStarted(s runner.SessionInfo, provider string, at time.Time) {
	r.mu.Lock()
	st := r.calls[sessionKey(s)]
	if st == nil {
		st = r.trackLocked(sessionKey(s))
	}
	paused := st.paused
	st.paused = ""
	if st.start.IsZero() {
		st.start = at
	}
	st.touched = r.now()
	r.mu.Unlock()
	if paused != "" {
		r.llmRetries.WithLabelValues(provider, paused).Inc()
	}
}

// callEnded records an answered model call and its usage.
func (r *Recorder) callEnded(s runner.SessionInfo, provider string, at time.Time, usage *llm.Usage) {
	key := sessionKey(s)
	r.mu.Lock()
	var start time.Time
	if st := r.calls[key]; st != nil {
		start = st.start
		delete(r.calls, key)
	}
	model := r.modelLabelLocked(provider, s.Model)
	r.mu.Unlock()
	r.llmCalls.WithLabelValues(provider, model, outcomeOK).Inc()
	if !start.IsZero() {
		r.llmLatency.WithLabelValues(provider, model).Observe(max(at.Sub(start), 0).Seconds())
	}
	r.turns.WithLabelValues(s.Namespace).Inc()
	if usage == nil {
		return
	}
	for _, t := range []struct {
		kind string
		n    int64
	}{
		{"input", usage.InputTokens}, {"output", usage.OutputTokens}, {"cache_read", usage.CacheReadTokens},
		{"cache_write", usage.CacheWriteTokens}, {"reasoning", usage.ReasoningTokens},
	} {
		r.tokens.WithLabelValues(s.Namespace, provider, model, t.kind).Add(float64(max(t.n, 0)))
	}
	// Prices are looked up by the spec's provider and model, not their
	// label values.
	if cost, ok := r.prices.Cost(s.Provider, s.Model, *usage); ok {
		r.cost.add(costKey{s.Namespace, provider, model}, cost)
	} else {
		r.unpriced.WithLabelValues(provider, model).Inc()
	}
}

// callFailed records an ERROR event: a model call that failed after the
// client's retries.
func (r *Recorder) callFailed(s runner.SessionInfo, provider, kind string) {
	kind = errorKindLabel(kind)
	key := sessionKey(s)
	r.mu.Lock()
	st := r.calls[key]
	inFlight := st != nil && !st.start.IsZero()
	switch {
	case slices.Contains(retryableKinds, kind):
		if st == nil {
			st = r.trackLocked(key)
		}
		st.start, st.paused, st.touched = time.Time{}, kind, r.now()
	case st != nil:
		delete(r.calls, key)
	}
	model := r.modelLabelLocked(provider, s.Model)
	r.mu.Unlock()
	r.llmErrors.WithLabelValues(provider, kind).Inc()
	if inFlight {
		r.llmCalls.WithLabelValues(provider, model, outcomeError).Inc()
	}
}

// modelLabelLocked is the model label of model of provider (a label
// value): model itself while fewer than MaxModelLabels pairs are in use or
// when the pair is, else "other". r.mu is held.
func (r *Recorder) modelLabelLocked(provider, model string) string {
	key := provider + "\x00" + model
	if r.models[key] {
		return model
	}
	if len(r.models) >= MaxModelLabels {
		return other
	}
	r.models[key] = true
	return model
}

// trackLocked adds the state of a session, first evicting the least
// recently touched one when maxTracked sessions are tracked (a session
// whose runner stopped in the middle of a call, without SESSION_END).
func (r *Recorder) trackLocked(key string) *callState {
	if len(r.calls) >= r.maxTracked {
		var oldest string
		var at time.Time
		for k, st := range r.calls {
			if oldest == "" || st.touched.Before(at) {
				oldest, at = k, st.touched
			}
		}
		delete(r.calls, oldest)
	}
	st := &callState{}
	r.calls[key] = st
	return st
}

// sessionKey identifies a session's state: its UID, or its namespace and
// name when the UID is not known.
func sessionKey(s runner.SessionInfo) string {
	if s.UID != "" {
		return string(s.UID)
	}
	return s.Namespace + "/" + s.Name
}

// eventTime is when ev happened.
func eventTime(r *Recorder, ev loop.Event) time.Time {
	if ev.Time.IsZero() {
		return r.now()
	}
	return ev.Time
}
