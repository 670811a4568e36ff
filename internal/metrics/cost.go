package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-operator/agent-operator/internal/pricing"
)

// costCounter is a counter vector of money kept as exact sums of
// pricing.Amounts (nano-units), so that the exposed total is the sum of the
// sessions' costs rounded once, not a float sum of many small terms.
type costCounter struct {
	desc *prometheus.Desc

	mu   sync.Mutex
	sums map[costKey]pricing.Amount
}

type costKey struct{ namespace, provider, model string }

func newCostCounter(currency string) *costCounter {
	return &costCounter{
		desc: prometheus.NewDesc(prefix+"llm_cost_total",
			"Cost of model calls in "+currency+" (currency units, from the operator's price table) by namespace, provider and model. Calls of models the table has no price for are not included (see "+prefix+"llm_unpriced_calls_total).",
			[]string{"namespace", "provider", "model"}, nil),
		sums: map[costKey]pricing.Amount{},
	}
}

func (c *costCounter) add(k costKey, a pricing.Amount) {
	c.mu.Lock()
	c.sums[k] += a
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *costCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *costCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, a := range c.sums {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(a)/1e9, k.namespace, k.provider, k.model)
	}
}
