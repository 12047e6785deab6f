package reconciler

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the LogicalVolume reconciler's metrics of a node agent.
type Metrics struct {
	orphansRemoved prometheus.Counter
	copies         *prometheus.CounterVec
	copyBytes      *prometheus.CounterVec
	copySent       *prometheus.CounterVec
}

// NewMetrics registers the reconciler's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		orphansRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "orphan_lvs_removed_total",
			Help: "LVs the start-up sweep removed because their LogicalVolume no longer existed.",
		}),
		copies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "copies_total",
			Help: "Copies of volumes from other nodes that ended, by mode (Delta, Mapped; empty when it failed before choosing) and result (ok, failed).",
		}, []string{"mode", "result"}),
		copyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "copy_bytes_total",
			Help: "Bytes of volume data copied from other nodes (before compression), by mode.",
		}, []string{"mode"}),
		copySent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "copy_received_bytes_total",
			Help: "Bytes of chunk data received from other nodes for copies (after compression), by mode.",
		}, []string{"mode"}),
	}
	reg.MustRegister(m.orphansRemoved, m.copies, m.copyBytes, m.copySent)
	return m
}

// orphanRemoved counts an orphan LV removed; m may be nil.
func (m *Metrics) orphanRemoved() {
	if m != nil {
		m.orphansRemoved.Inc()
	}
}

// copyEnded counts a copy that ended with err and its bytes; m may be nil.
func (m *Metrics) copyEnded(mode string, done, sent int64, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.copies.WithLabelValues(mode, result).Inc()
	m.copyBytes.WithLabelValues(mode).Add(float64(done))
	m.copySent.WithLabelValues(mode).Add(float64(sent))
}
