package reconciler

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the LogicalVolume reconciler's metrics of a node agent.
type Metrics struct {
	orphansRemoved prometheus.Counter
}

// NewMetrics registers the reconciler's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		orphansRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "orphan_lvs_removed_total",
			Help: "LVs the start-up sweep removed because their LogicalVolume no longer existed.",
		}),
	}
	reg.MustRegister(m.orphansRemoved)
	return m
}

// orphanRemoved counts an orphan LV removed; m may be nil.
func (m *Metrics) orphanRemoved() {
	if m != nil {
		m.orphansRemoved.Inc()
	}
}
