package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// SessionPhase is one AgentSession as the sessions gauges count it.
type SessionPhase struct {
	Namespace string
	// Phase is status.phase; empty counts as Pending.
	Phase string
	// Since is when the session entered Phase (e.g. the lastTransitionTime
	// of its Ready condition, or its creation for Pending and
	// Provisioning); zero when unknown, and then the session does not
	// count for the phase's age.
	Since time.Time
}

// SessionLister lists every AgentSession the manager watches; the manager
// backs it with its informer cache. It is called on every scrape.
type SessionLister func() ([]SessionPhase, error)

// sessionCollector exposes the sessions a SessionLister returns.
type sessionCollector struct {
	r      *Recorder
	list   SessionLister
	count  *prometheus.Desc
	maxAge *prometheus.Desc
	// errors is collected after the list, so a scrape counts its own
	// failure.
	errors prometheus.Counter
}

// CollectSessions registers the gauges of sessions by namespace and phase,
// read from list at every scrape: agent_operator_sessions and
// agent_operator_session_phase_max_age_seconds (and
// agent_operator_session_list_errors_total). It may be called once.
func (r *Recorder) CollectSessions(list SessionLister) error {
	c := &sessionCollector{
		r: r, list: list,
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "session_list_errors_total",
			Help: "Scrapes whose list of sessions failed (the session gauges were left out)."}),
		count: prometheus.NewDesc(prefix+"sessions",
			"AgentSessions by namespace and phase (every phase of a namespace with sessions, 0 included).",
			[]string{"namespace", "phase"}, nil),
		maxAge: prometheus.NewDesc(prefix+"session_phase_max_age_seconds",
			"Longest time any session of the namespace has been in the phase, for the phases a session works through (Pending, Provisioning, Running, AwaitingInput).",
			[]string{"namespace", "phase"}, nil),
	}
	if err := r.reg.Register(c); err != nil {
		return fmt.Errorf("register session gauges: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.maxAge
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector. When the list fails, the gauges
// are left out of the scrape (and agent_operator_session_list_errors_total
// counts it) rather than failing the whole scrape.
func (c *sessionCollector) Collect(ch chan<- prometheus.Metric) {
	sessions, err := c.list()
	if err != nil {
		c.errors.Inc()
	}
	c.errors.Collect(ch)
	if err != nil {
		return
	}
	type key struct{ namespace, phase string }
	counts := map[key]int{}
	ages := map[key]time.Duration{}
	namespaces := map[string]bool{}
	now := c.r.now()
	for _, s := range sessions {
		k := key{s.Namespace, phaseLabel(s.Phase)}
		namespaces[s.Namespace] = true
		counts[k]++
		if !s.Since.IsZero() && !agentsv1.Phase(k.phase).IsFinal() && k.phase != other {
			ages[k] = max(ages[k], now.Sub(s.Since))
		}
	}
	for ns := range namespaces {
		c.r.seeNamespace(ns)
		for _, p := range phases {
			ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(counts[key{ns, p}]), ns, p)
		}
		if n := counts[key{ns, other}]; n > 0 {
			ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n), ns, other)
		}
	}
	for k, age := range ages {
		ch <- prometheus.MustNewConstMetric(c.maxAge, prometheus.GaugeValue, max(age, 0).Seconds(), k.namespace, k.phase)
	}
}

// CollectDriven registers agent_operator_sessions_driven: the sessions this
// replica's runner drives at each scrape (count, e.g. runner.Sessions). It
// has no labels: the scrape's pod label tells the replicas apart.
func (r *Recorder) CollectDriven(count func() int) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "sessions_driven",
		Help: "Sessions whose agent loop this manager replica drives (its runners that have not ended)."},
		func() float64 { return float64(count()) })
	if err := r.reg.Register(g); err != nil {
		return fmt.Errorf("register sessions driven gauge: %w", err)
	}
	return nil
}
