package csi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Metrics are the controller's CSI metrics.
type Metrics struct {
	createDuration *prometheus.HistogramVec
}

// NewMetrics registers the controller's CSI metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{createDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "thinlvm", Subsystem: "controller", Name: "create_volume_duration_seconds",
		Help:    "CreateVolume latency, from the request to the node agent's verdict, by gRPC code.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	}, []string{"code"})}
	reg.MustRegister(m.createDuration)
	return m
}

func (m *Metrics) observeCreate(start time.Time, err error) {
	m.createDuration.WithLabelValues(status.Code(err).String()).Observe(time.Since(start).Seconds())
}

func wrapInt64(v int64) *wrapperspb.Int64Value { return wrapperspb.Int64(v) }
