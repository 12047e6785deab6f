package csi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
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

// phaseCollector counts LogicalVolumes by phase (Ready, Failed, Pending) at
// each scrape, from the manager's cache: a walk over every LogicalVolume
// the cache holds per scrape, which copies none of them.
type phaseCollector struct {
	reader client.Reader
	desc   *prometheus.Desc
}

// NewPhaseCollector registers the thinlvm_controller_logical_volumes gauge
// with reg; reader is the manager's cached client.
func NewPhaseCollector(reg prometheus.Registerer, reader client.Reader) {
	reg.MustRegister(&phaseCollector{reader: reader, desc: prometheus.NewDesc("thinlvm_controller_logical_volumes",
		"LogicalVolumes by phase: Ready, Failed (lvmd refused them) or Pending.", []string{"phase"}, nil)})
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &thinlvmv1.LogicalVolumeList{}
	if err := c.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	counts := map[string]float64{"Ready": 0, "Failed": 0, "Pending": 0}
	for i := range list.Items {
		conds := list.Items[i].Status.Conditions
		switch {
		case meta.IsStatusConditionTrue(conds, thinlvmv1.ConditionFailed):
			counts["Failed"]++
		case meta.IsStatusConditionTrue(conds, thinlvmv1.ConditionReady):
			counts["Ready"]++
		default:
			counts["Pending"]++
		}
	}
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, phase)
	}
}
