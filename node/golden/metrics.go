package golden

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the golden bases' metrics of a node agent.
type Metrics struct {
	populations *prometheus.CounterVec
	duration    prometheus.Histogram
	sources     *prometheus.CounterVec
}

// NewMetrics registers the golden-base metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		populations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "golden_populations_total",
			Help: "Golden base populations that ended, by result (success or failure).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "thinlvm", Subsystem: "node", Name: "golden_population_duration_seconds",
			Help:    "Duration of the golden base populations that succeeded: download, conversion, checksum, seal.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
	}
	m.sources = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "thinlvm", Subsystem: "node", Name: "golden_bases_made_total",
		Help: "Golden bases made, by where their data came from: origin (the image's URL or registry), peer (another node's base), volume (a snapshot of the source volume here).",
	}, []string{"from"})
	// Both results exist from the start: a rate of failures is 0, not absent.
	m.populations.WithLabelValues("success")
	m.populations.WithLabelValues("failure")
	for _, from := range []string{"origin", "peer", "volume"} {
		m.sources.WithLabelValues(from)
	}
	reg.MustRegister(m.populations, m.duration, m.sources)
	return m
}

// observe records a population that ended; m may be nil.
func (m *Metrics) observe(begin time.Time, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.populations.WithLabelValues("failure").Inc()
		return
	}
	m.populations.WithLabelValues("success").Inc()
	m.duration.Observe(time.Since(begin).Seconds())
}

// made counts a base made from from: origin, volume, or a peer's name.
func (m *Metrics) made(from string) {
	if m == nil {
		return
	}
	if from != "origin" && from != "volume" {
		from = "peer"
	}
	m.sources.WithLabelValues(from).Inc()
}
