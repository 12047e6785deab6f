package plugin

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// reservationsGauge is how many pods hold a reservation their node's
// LVMNode does not show yet. It is served with kube-scheduler's own
// metrics; once every scheduled pod's volumes exist it returns to 0, and a
// value that stays up means reservations are leaking (docs/scheduler.md).
var reservationsGauge = metrics.NewGauge(&metrics.GaugeOpts{
	Name:           "thinlvm_scheduler_reservations",
	Help:           "Pods holding a thinlvm capacity reservation that their node's LVMNode does not report yet.",
	StabilityLevel: metrics.ALPHA,
})

func init() {
	legacyregistry.MustRegister(reservationsGauge)
}
