package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/pricing"
	"github.com/agent-operator/agent-operator/internal/runner"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

var (
	sessA = runner.SessionInfo{Namespace: "team-a", Name: "fix-bug", UID: "uid-a", Provider: "anthropic", Model: "claude-sonnet-4-5"}
	sessB = runner.SessionInfo{Namespace: "team-b", Name: "tune", UID: "uid-b", ParentUID: "uid-a", Provider: "openai", Model: "my-finetune"}
)

// step is one event of a scripted run; check, if set, runs after it.
type step struct {
	s     runner.SessionInfo
	ev    loop.Event
	check func(t *testing.T, r *Recorder)
}

func ev(kind loop.EventKind, at time.Duration, d loop.EventData) loop.Event {
	return loop.Event{Kind: kind, Time: t0.Add(at), Data: d}
}

func tracked(n int) func(t *testing.T, r *Recorder) {
	return func(t *testing.T, r *Recorder) {
		t.Helper()
		r.mu.Lock()
		got := len(r.calls)
		r.mu.Unlock()
		if got != n {
			t.Errorf("sessions tracked = %d, want %d", got, n)
		}
	}
}

// script is a session of team-a (anthropic, priced) with tool calls, a
// stream restart, a rate-limit pause and its resumed call, and one of
// team-b (an unpriced model) that fails on an authentication error.
var script = []step{
	{s: sessA, ev: ev(loop.EventSessionStart, 0, loop.EventData{State: "PROCESSING"})},
	{s: sessA, ev: ev(loop.EventAssistantTextStart, 0, loop.EventData{}), check: tracked(1)},
	// 1M input (800k cache reads, 100k cache writes, 100k plain) and 100k
	// output: 0.30 + 0.24 + 0.375 + 1.50 = 2.415 USD.
	{s: sessA, ev: ev(loop.EventAssistantTextEnd, 2*time.Second, loop.EventData{Usage: &llm.Usage{
		InputTokens: 1_000_000, CacheReadTokens: 800_000, CacheWriteTokens: 100_000, OutputTokens: 100_000, ReasoningTokens: 20_000}}),
		check: tracked(0)},
	{s: sessA, ev: ev(loop.EventToolCallStart, 3*time.Second, loop.EventData{ToolName: "shell"})},
	{s: sessA, ev: ev(loop.EventToolCallEnd, 4*time.Second, loop.EventData{ToolName: "shell", DurationMs: 1500})},
	{s: sessA, ev: ev(loop.EventToolCallEnd, 5*time.Second, loop.EventData{ToolName: "mcp__github__create_issue", IsError: true, DurationMs: 20})},
	{s: sessA, ev: ev(loop.EventToolCallEnd, 6*time.Second, loop.EventData{ToolName: "spawn_agent", DurationMs: 300})},
	{s: sessA, ev: ev(loop.EventToolCallEnd, 7*time.Second, loop.EventData{ToolName: "read_file", IsError: true, DurationMs: 3})},
	// A stream cut and made again: one call of 5 s, retried once.
	{s: sessA, ev: ev(loop.EventAssistantTextStart, 10*time.Second, loop.EventData{})},
	{s: sessA, ev: ev(loop.EventWarning, 12*time.Second, loop.EventData{Message: loop.StreamRestartWarning})},
	{s: sessA, ev: ev(loop.EventAssistantTextStart, 13*time.Second, loop.EventData{})},
	{s: sessA, ev: ev(loop.EventWarning, 14*time.Second, loop.EventData{Message: "Context usage at ~85% of context window"})},
	// 1000 input, 100 output: 0.003 + 0.0015 USD.
	{s: sessA, ev: ev(loop.EventAssistantTextEnd, 15*time.Second, loop.EventData{Usage: &llm.Usage{InputTokens: 1000, OutputTokens: 100}})},
	// A rate limit pauses the session; its next call is a retry.
	{s: sessA, ev: ev(loop.EventAssistantTextStart, 20*time.Second, loop.EventData{})},
	{s: sessA, ev: ev(loop.EventError, 21*time.Second, loop.EventData{ErrorKind: "rate_limit"}), check: tracked(1)},
	{s: sessA, ev: ev(loop.EventAssistantTextStart, 80*time.Second, loop.EventData{})},
	// 10 input, 1 output: 0.00003 + 0.000015 USD.
	{s: sessA, ev: ev(loop.EventAssistantTextEnd, 81*time.Second, loop.EventData{Usage: &llm.Usage{InputTokens: 10, OutputTokens: 1}})},
	{s: sessA, ev: ev(loop.EventAssistantTextStart, 90*time.Second, loop.EventData{}), check: tracked(1)},
	// The input ends (e.g. cancelled) with the call in flight: SESSION_END
	// drops the session's state.
	{s: sessA, ev: ev(loop.EventSessionEnd, 91*time.Second, loop.EventData{State: "CLOSED"}), check: tracked(0)},

	{s: sessB, ev: ev(loop.EventAssistantTextStart, 0, loop.EventData{})},
	{s: sessB, ev: ev(loop.EventAssistantTextEnd, 500*time.Millisecond, loop.EventData{Usage: &llm.Usage{InputTokens: 500, OutputTokens: 50}})},
	{s: sessB, ev: ev(loop.EventAssistantTextStart, time.Second, loop.EventData{}), check: tracked(1)},
	// Not retryable: nothing is kept.
	{s: sessB, ev: ev(loop.EventError, 2*time.Second, loop.EventData{ErrorKind: "authentication"}), check: tracked(0)},
	{s: sessB, ev: ev(loop.EventSessionEnd, 3*time.Second, loop.EventData{State: "CLOSED"}), check: tracked(0)},
}

func newRecorder(t *testing.T) (*Recorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	r, err := New(reg, pricing.Default())
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return t0.Add(time.Hour) }
	return r, reg
}

func play(t *testing.T, r *Recorder, steps []step) {
	t.Helper()
	for i, st := range steps {
		r.Observe(st.s, st.ev)
		if st.check != nil {
			t.Run(fmt.Sprintf("after step %d %s", i, st.ev.Kind), func(t *testing.T) { st.check(t, r) })
		}
	}
}

// exposition is the expected text of the named metric families: the HELP
// and TYPE lines of what reg exposes, followed by body.
func exposition(t *testing.T, mfs []*dto.MetricFamily, bodies map[string]string) (string, []string) {
	t.Helper()
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	var b strings.Builder
	var names []string
	for name, body := range bodies {
		mf := byName[name]
		if mf == nil {
			t.Fatalf("%s is not exposed", name)
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s", name, mf.GetHelp(), name, strings.ToLower(mf.GetType().String()), body)
		names = append(names, name)
	}
	return b.String(), names
}

// assertExposition gathers reg once and compares the named families with
// bodies.
func assertExposition(t *testing.T, reg prometheus.Gatherer, bodies map[string]string) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want, names := exposition(t, mfs, bodies)
	once := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil })
	if err := testutil.GatherAndCompare(once, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

func TestObserveScript(t *testing.T) {
	r, reg := newRecorder(t)
	play(t, r, script)
	assertExposition(t, reg, map[string]string{
		"agent_operator_llm_tokens_total": `
agent_operator_llm_tokens_total{kind="cache_read",model="claude-sonnet-4-5",namespace="team-a",provider="anthropic"} 800000
agent_operator_llm_tokens_total{kind="cache_write",model="claude-sonnet-4-5",namespace="team-a",provider="anthropic"} 100000
agent_operator_llm_tokens_total{kind="input",model="claude-sonnet-4-5",namespace="team-a",provider="anthropic"} 1001010
agent_operator_llm_tokens_total{kind="output",model="claude-sonnet-4-5",namespace="team-a",provider="anthropic"} 100101
agent_operator_llm_tokens_total{kind="reasoning",model="claude-sonnet-4-5",namespace="team-a",provider="anthropic"} 20000
agent_operator_llm_tokens_total{kind="cache_read",model="my-finetune",namespace="team-b",provider="openai"} 0
agent_operator_llm_tokens_total{kind="cache_write",model="my-finetune",namespace="team-b",provider="openai"} 0
agent_operator_llm_tokens_total{kind="input",model="my-finetune",namespace="team-b",provider="openai"} 500
agent_operator_llm_tokens_total{kind="output",model="my-finetune",namespace="team-b",provider="openai"} 50
agent_operator_llm_tokens_total{kind="reasoning",model="my-finetune",namespace="team-b",provider="openai"} 0
`,
		"agent_operator_llm_cost_total": `
agent_operator_llm_cost_total{model="claude-sonnet-4-5",namespace="team-a",provider="anthropic"} 2.419545
`,
		"agent_operator_llm_unpriced_calls_total": `
agent_operator_llm_unpriced_calls_total{model="my-finetune",provider="openai"} 1
`,
		"agent_operator_llm_calls_total": `
agent_operator_llm_calls_total{model="claude-sonnet-4-5",outcome="error",provider="anthropic"} 1
agent_operator_llm_calls_total{model="claude-sonnet-4-5",outcome="ok",provider="anthropic"} 3
agent_operator_llm_calls_total{model="my-finetune",outcome="error",provider="openai"} 1
agent_operator_llm_calls_total{model="my-finetune",outcome="ok",provider="openai"} 1
`,
		// anthropic: 2 s, 5 s (from the first START of the restarted
		// call), 1 s; openai: 0.5 s.
		"agent_operator_llm_call_duration_seconds": `
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="0.5"} 0
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="1"} 1
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="2"} 2
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="5"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="10"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="20"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="30"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="60"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="120"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="300"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="600"} 3
agent_operator_llm_call_duration_seconds_bucket{model="claude-sonnet-4-5",provider="anthropic",le="+Inf"} 3
agent_operator_llm_call_duration_seconds_sum{model="claude-sonnet-4-5",provider="anthropic"} 8
agent_operator_llm_call_duration_seconds_count{model="claude-sonnet-4-5",provider="anthropic"} 3
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="0.5"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="1"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="2"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="5"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="10"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="20"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="30"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="60"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="120"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="300"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="600"} 1
agent_operator_llm_call_duration_seconds_bucket{model="my-finetune",provider="openai",le="+Inf"} 1
agent_operator_llm_call_duration_seconds_sum{model="my-finetune",provider="openai"} 0.5
agent_operator_llm_call_duration_seconds_count{model="my-finetune",provider="openai"} 1
`,
		"agent_operator_llm_errors_total": `
agent_operator_llm_errors_total{kind="authentication",provider="openai"} 1
agent_operator_llm_errors_total{kind="rate_limit",provider="anthropic"} 1
`,
		"agent_operator_llm_retries_total": `
agent_operator_llm_retries_total{kind="rate_limit",provider="anthropic"} 1
agent_operator_llm_retries_total{kind="stream_restart",provider="anthropic"} 1
`,
		"agent_operator_turns_total": `
agent_operator_turns_total{namespace="team-a"} 3
agent_operator_turns_total{namespace="team-b"} 1
`,
		"agent_operator_tool_calls_total": `
agent_operator_tool_calls_total{outcome="error",tool="other"} 1
agent_operator_tool_calls_total{outcome="error",tool="read_file"} 1
agent_operator_tool_calls_total{outcome="ok",tool="shell"} 1
agent_operator_tool_calls_total{outcome="ok",tool="spawn_agent"} 1
`,
		"agent_operator_tool_call_duration_seconds": histogram("agent_operator_tool_call_duration_seconds",
			[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
			map[string][]float64{
				`tool="other",transport="other"`:       {0.02},
				`tool="read_file",transport="exec"`:    {0.003},
				`tool="shell",transport="exec"`:        {1.5},
				`tool="spawn_agent",transport="local"`: {0.3},
			}),
	})
}

// histogram is the exposition of a histogram with the given observations
// per label set.
func histogram(name string, buckets []float64, series map[string][]float64) string {
	var b strings.Builder
	for labels, obs := range series {
		sum := 0.0
		for _, o := range obs {
			sum += o
		}
		for _, le := range buckets {
			n := 0
			for _, o := range obs {
				if o <= le {
					n++
				}
			}
			fmt.Fprintf(&b, "%s_bucket{%s,le=\"%g\"} %d\n", name, labels, le, n)
		}
		fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, len(obs))
		fmt.Fprintf(&b, "%s_sum{%s} %g\n", name, labels, sum)
		fmt.Fprintf(&b, "%s_count{%s} %d\n", name, labels, len(obs))
	}
	return b.String()
}

func TestCostHelpStatesCurrency(t *testing.T) {
	for _, tc := range []struct {
		file, currency string
	}{
		{"", "USD"},
		{"replace: true\ncurrency: EUR\nmodels: [{provider: anthropic, model: \"*\", input: \"1\", output: \"1\"}]\n", "EUR"},
	} {
		prices := pricing.Default()
		if tc.file != "" {
			var err error
			if prices, err = pricing.Parse([]byte(tc.file)); err != nil {
				t.Fatal(err)
			}
		}
		reg := prometheus.NewRegistry()
		r, err := New(reg, prices)
		if err != nil {
			t.Fatal(err)
		}
		r.Observe(sessA, ev(loop.EventAssistantTextEnd, 0, loop.EventData{Usage: &llm.Usage{InputTokens: 1}}))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "agent_operator_llm_cost_total" {
				found = true
				if !strings.Contains(mf.GetHelp(), " in "+tc.currency+" ") {
					t.Errorf("HELP %q does not state the currency %s", mf.GetHelp(), tc.currency)
				}
			}
		}
		if !found {
			t.Error("agent_operator_llm_cost_total is not exposed")
		}
	}
}

func TestToolLabels(t *testing.T) {
	for _, tc := range []struct{ name, tool, transport string }{
		{"shell", "shell", "exec"},
		{"apply_patch", "apply_patch", "exec"},
		{"read_many_files", "read_many_files", "exec"},
		{"spawn_agent", "spawn_agent", "local"},
		{"wait", "wait", "local"},
		{"todo", "todo", "local"},
		{"skill", "skill", "local"},
		{"mcp__github__create_issue", "other", "other"},
		{"", "other", "other"},
		{"Shell", "other", "other"},
	} {
		tool, transport := toolLabels(tc.name)
		if tool != tc.tool || transport != tc.transport {
			t.Errorf("toolLabels(%q) = %s, %s; want %s, %s", tc.name, tool, transport, tc.tool, tc.transport)
		}
	}
}

func TestUnboundedValuesBecomeOther(t *testing.T) {
	r, reg := newRecorder(t)
	s := runner.SessionInfo{Namespace: "ns", Name: "x", UID: "u", Provider: "made-up", Model: "m"}
	r.Observe(s, ev(loop.EventAssistantTextStart, 0, loop.EventData{}))
	r.Observe(s, ev(loop.EventError, time.Second, loop.EventData{ErrorKind: "teapot"}))
	r.SessionEnded("ns", "Exploded", "Gremlins", time.Minute)
	assertExposition(t, reg, map[string]string{
		"agent_operator_llm_errors_total": `
agent_operator_llm_errors_total{kind="other",provider="other"} 1
`,
		"agent_operator_llm_calls_total": `
agent_operator_llm_calls_total{model="m",outcome="error",provider="other"} 1
`,
	})
	if got := testutil.ToFloat64(r.ended.WithLabelValues("ns", "other", "other")); got != 1 {
		t.Errorf("sessions_ended_total{phase=other,reason=other} = %v, want 1", got)
	}
}

// Sessions naming ever new models (an OpenAI-compatible server answers to
// any name) grow the series only up to MaxModelLabels model names; the
// calls of the others are counted under model="other", those of a name in
// use still under its name.
func TestModelLabelsAreBounded(t *testing.T) {
	r, _ := newRecorder(t)
	sess := func(model string) runner.SessionInfo {
		return runner.SessionInfo{Namespace: "ns", Name: model, UID: types.UID("uid-" + model),
			Provider: "openai-compatible", Model: model}
	}
	const extra = 10
	for i := range MaxModelLabels + extra {
		r.Observe(sess(fmt.Sprintf("model-%d", i)), ev(loop.EventAssistantTextEnd, 0, loop.EventData{Usage: &llm.Usage{InputTokens: 1}}))
	}
	r.Observe(sess("model-0"), ev(loop.EventAssistantTextEnd, 0, loop.EventData{Usage: &llm.Usage{InputTokens: 1}}))
	for _, c := range []prometheus.Collector{r.llmCalls, r.unpriced} {
		if n := testutil.CollectAndCount(c); n != MaxModelLabels+1 {
			t.Errorf("%d series, want %d model names and other", n, MaxModelLabels)
		}
	}
	provider := "openai-compatible"
	if got := testutil.ToFloat64(r.llmCalls.WithLabelValues(provider, other, outcomeOK)); got != extra {
		t.Errorf("calls under model=other = %v, want %d", got, extra)
	}
	if got := testutil.ToFloat64(r.llmCalls.WithLabelValues(provider, "model-0", outcomeOK)); got != 2 {
		t.Errorf("calls of model-0 = %v, want 2 (a name in use keeps its label)", got)
	}
}

func TestTrackedSessionsAreBounded(t *testing.T) {
	r, reg := newRecorder(t)
	r.maxTracked = 2
	clock := t0
	r.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	sess := func(i int) runner.SessionInfo {
		return runner.SessionInfo{Namespace: "ns", Name: fmt.Sprint(i), UID: types.UID("uid-" + fmt.Sprint(i)), Provider: "scripted", Model: "m"}
	}
	for i := range 3 {
		r.Observe(sess(i), ev(loop.EventAssistantTextStart, 0, loop.EventData{}))
	}
	tracked(2)(t, r)
	r.mu.Lock()
	_, first := r.calls["uid-0"]
	r.mu.Unlock()
	if first {
		t.Error("the least recently touched session was not evicted")
	}
	// The evicted session's call ends without a latency; the others' with.
	for i := range 3 {
		r.Observe(sess(i), ev(loop.EventAssistantTextEnd, time.Second, loop.EventData{}))
	}
	tracked(0)(t, r)
	assertExposition(t, reg, map[string]string{
		"agent_operator_llm_calls_total": `
agent_operator_llm_calls_total{model="m",outcome="ok",provider="scripted"} 3
`,
		"agent_operator_llm_call_duration_seconds": histogram("agent_operator_llm_call_duration_seconds",
			[]float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
			map[string][]float64{`model="m",provider="scripted"`: {1, 1}}),
	})
}

func TestSessionEnded(t *testing.T) {
	r, reg := newRecorder(t)
	r.SessionEnded("team-a", "Failed", "TokenBudgetExceeded", 90*time.Second)
	r.SessionEnded("team-a", "Succeeded", "Succeeded", 20*time.Minute)
	r.SessionEnded("team-a", "Succeeded", "Succeeded", -time.Second) // clock skew counts as 0
	var zeros strings.Builder
	for _, o := range outcomes {
		n := map[string]int{"Failed/TokenBudgetExceeded": 1, "Succeeded/Succeeded": 2}[o.phase+"/"+o.reason]
		fmt.Fprintf(&zeros, "agent_operator_sessions_ended_total{namespace=\"team-a\",phase=%q,reason=%q} %d\n", o.phase, o.reason, n)
	}
	buckets := []float64{10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400}
	assertExposition(t, reg, map[string]string{
		"agent_operator_sessions_ended_total": zeros.String(),
		"agent_operator_session_duration_seconds": histogram("agent_operator_session_duration_seconds", buckets, map[string][]float64{
			`namespace="team-a",phase="Failed"`:    {90},
			`namespace="team-a",phase="Succeeded"`: {1200, 0},
		}),
	})
}

func TestNamespacesSeenGetZeroEndCounters(t *testing.T) {
	r, reg := newRecorder(t)
	r.Observe(sessB, ev(loop.EventSessionStart, 0, loop.EventData{}))
	n, err := testutil.GatherAndCount(reg, "agent_operator_sessions_ended_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(outcomes) {
		t.Errorf("%d sessions_ended_total series after the first event of a namespace, want %d", n, len(outcomes))
	}
	if got := testutil.ToFloat64(r.ended.WithLabelValues("team-b", "Failed", "CostBudgetExceeded")); got != 0 {
		t.Errorf("sessions_ended_total{reason=CostBudgetExceeded} = %v, want 0", got)
	}
}

func TestSessionGauges(t *testing.T) {
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name     string
		sessions []SessionPhase
		err      error
		want     map[string]string
	}{
		{
			name: "counts and ages",
			sessions: []SessionPhase{
				{Namespace: "a", Phase: "Provisioning", Since: now.Add(-20 * time.Minute)},
				{Namespace: "a", Phase: "Provisioning", Since: now.Add(-30 * time.Second)},
				{Namespace: "a", Phase: "", Since: now.Add(-time.Minute)},
				{Namespace: "a", Phase: "Succeeded", Since: now.Add(-48 * time.Hour)},
				{Namespace: "b", Phase: "Running"},
				{Namespace: "b", Phase: "Weird"},
			},
			want: map[string]string{
				"agent_operator_sessions": `
agent_operator_sessions{namespace="a",phase="Pending"} 1
agent_operator_sessions{namespace="a",phase="Provisioning"} 2
agent_operator_sessions{namespace="a",phase="Running"} 0
agent_operator_sessions{namespace="a",phase="AwaitingInput"} 0
agent_operator_sessions{namespace="a",phase="Succeeded"} 1
agent_operator_sessions{namespace="a",phase="Failed"} 0
agent_operator_sessions{namespace="a",phase="Aborted"} 0
agent_operator_sessions{namespace="b",phase="Pending"} 0
agent_operator_sessions{namespace="b",phase="Provisioning"} 0
agent_operator_sessions{namespace="b",phase="Running"} 1
agent_operator_sessions{namespace="b",phase="AwaitingInput"} 0
agent_operator_sessions{namespace="b",phase="Succeeded"} 0
agent_operator_sessions{namespace="b",phase="Failed"} 0
agent_operator_sessions{namespace="b",phase="Aborted"} 0
agent_operator_sessions{namespace="b",phase="other"} 1
`,
				// Final phases and unknown times have no age.
				"agent_operator_session_phase_max_age_seconds": `
agent_operator_session_phase_max_age_seconds{namespace="a",phase="Pending"} 60
agent_operator_session_phase_max_age_seconds{namespace="a",phase="Provisioning"} 1200
`,
				"agent_operator_session_list_errors_total": "agent_operator_session_list_errors_total 0\n",
			},
		},
		{
			name: "list fails",
			err:  errors.New("cache not synced"),
			want: map[string]string{
				"agent_operator_session_list_errors_total": "agent_operator_session_list_errors_total 1\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, reg := newRecorder(t)
			if err := r.CollectSessions(func() ([]SessionPhase, error) { return tc.sessions, tc.err }); err != nil {
				t.Fatal(err)
			}
			assertExposition(t, reg, tc.want)
			if tc.err != nil {
				n, err := testutil.GatherAndCount(reg, "agent_operator_sessions", "agent_operator_session_phase_max_age_seconds")
				if err != nil || n != 0 {
					t.Errorf("session gauges after a failed list: %d series, %v; want none", n, err)
				}
			}
		})
	}
}

func TestManagerMethods(t *testing.T) {
	r, reg := newRecorder(t)
	r.ExecStreamReconnected("team-a")
	r.ExecStreamReconnected("team-a")
	r.ObserveJournalPublish(3*time.Millisecond, nil)
	r.ObserveJournalPublish(2*time.Second, errors.New("timeout"))
	r.SetJournalAvailable(true)
	r.SetJournalAvailable(false)
	r.SetWarmPoolPods("ci", 4)
	r.SetWarmPoolPods("ci", 3)
	r.WarmPoolClaim("ci", true)
	r.WarmPoolClaim("ci", false)
	r.WarmPoolClaim("ci", true)
	hook := r.LLMRetryHook("anthropic")
	hook(1, &llm.Error{Kind: llm.KindRateLimit}, time.Second)
	hook(2, fmt.Errorf("after 2 attempts: %w", &llm.Error{Kind: llm.KindRateLimit}), time.Second)
	r.LLMRetryHook("gemini")(1, errors.New("not an llm error"), 0)
	assertExposition(t, reg, map[string]string{
		"agent_operator_exec_stream_reconnects_total": `agent_operator_exec_stream_reconnects_total{namespace="team-a"} 2
`,
		"agent_operator_journal_publish_duration_seconds": histogram("agent_operator_journal_publish_duration_seconds",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
			map[string][]float64{`outcome="ok"`: {0.003}, `outcome="error"`: {2}}),
		"agent_operator_journal_available": "agent_operator_journal_available 0\n",
		"agent_operator_warm_pool_pods":    `agent_operator_warm_pool_pods{namespace="ci"} 3` + "\n",
		"agent_operator_warm_pool_claims_total": `
agent_operator_warm_pool_claims_total{namespace="ci",result="claimed"} 2
agent_operator_warm_pool_claims_total{namespace="ci",result="miss"} 1
`,
		"agent_operator_llm_client_retries_total": `
agent_operator_llm_client_retries_total{kind="rate_limit",provider="anthropic"} 2
agent_operator_llm_client_retries_total{kind="unknown",provider="gemini"} 1
`,
	})
}

// The driven gauge reads the runner's count at each scrape.
func TestSessionsDrivenGauge(t *testing.T) {
	for _, n := range []int{0, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r, reg := newRecorder(t)
			driven := n
			if err := r.CollectDriven(func() int { return driven }); err != nil {
				t.Fatal(err)
			}
			assertExposition(t, reg, map[string]string{"agent_operator_sessions_driven": fmt.Sprintf("agent_operator_sessions_driven %d\n", n)})
			driven++
			assertExposition(t, reg, map[string]string{"agent_operator_sessions_driven": fmt.Sprintf("agent_operator_sessions_driven %d\n", n+1)})
		})
	}
}

func TestNewRefusesDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, nil); err != nil {
		t.Fatal(err)
	}
	_, err := New(reg, nil)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Errorf("second New on one registry: %v, want an AlreadyRegisteredError", err)
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("New without a registerer succeeded")
	}
}

func TestConcurrentSessions(t *testing.T) {
	r, _ := newRecorder(t)
	const sessions, calls = 32, 50
	done := make(chan struct{})
	for i := range sessions {
		go func() {
			defer func() { done <- struct{}{} }()
			s := runner.SessionInfo{Namespace: "ns", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint("uid-", i)), Provider: "anthropic", Model: "claude-haiku-4-5"}
			for c := range calls {
				at := time.Duration(c) * time.Second
				r.Observe(s, ev(loop.EventAssistantTextStart, at, loop.EventData{}))
				r.Observe(s, ev(loop.EventAssistantTextDelta, at, loop.EventData{Delta: "x"}))
				// 1000 input tokens at 1 USD per million: 0.001 USD.
				r.Observe(s, ev(loop.EventAssistantTextEnd, at+time.Second, loop.EventData{Usage: &llm.Usage{InputTokens: 1000}}))
				r.Observe(s, ev(loop.EventToolCallEnd, at+time.Second, loop.EventData{ToolName: "grep", DurationMs: 10}))
			}
			r.Observe(s, ev(loop.EventSessionEnd, time.Hour, loop.EventData{State: "IDLE"}))
		}()
	}
	for range sessions {
		<-done
	}
	tracked(0)(t, r)
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"turns", testutil.ToFloat64(r.turns.WithLabelValues("ns")), sessions * calls},
		{"input tokens", testutil.ToFloat64(r.tokens.WithLabelValues("ns", "anthropic", "claude-haiku-4-5", "input")), sessions * calls * 1000},
		{"cost", testutil.ToFloat64(r.cost), sessions * calls * 0.001},
		{"tool calls", testutil.ToFloat64(r.toolCalls.WithLabelValues("grep", "ok")), sessions * calls},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// Start stages are observed by stage; a stage outside the known set is
// "other", so a caller cannot grow the number of series.
func TestSessionStartStage(t *testing.T) {
	buckets := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	cases := []struct {
		name    string
		observe map[string][]time.Duration
		want    map[string][]float64
	}{
		{"known stages", map[string][]time.Duration{
			StageRunnerClaim:   {2 * time.Millisecond},
			StageExecHandshake: {20 * time.Millisecond, 40 * time.Millisecond},
			StageSpare:         {time.Millisecond},
		}, map[string][]float64{`stage="runner_claim"`: {0.002}, `stage="exec_handshake"`: {0.02, 0.04}, `stage="spare"`: {0.001}}},
		{"unknown stage is other", map[string][]time.Duration{"made_up": {time.Second}},
			map[string][]float64{`stage="other"`: {1}}},
		{"negative is zero", map[string][]time.Duration{StageBuild: {-time.Second}},
			map[string][]float64{`stage="build"`: {0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, reg := newRecorder(t)
			for stage, ds := range tc.observe {
				for _, d := range ds {
					r.SessionStartStage(stage, d)
				}
			}
			assertExposition(t, reg, map[string]string{
				"agent_operator_session_start_stage_seconds": histogram("agent_operator_session_start_stage_seconds", buckets, tc.want),
			})
		})
	}
}
