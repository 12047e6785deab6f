// Command thinlvm-scheduler for Kubernetes 1.34 is the scheduler of
// sigs.k8s.io/scheduler-plugins with ThinLVM registered beside its
// plugins: a cluster that runs scheduler-plugins' second scheduler (for
// coscheduling, capacity scheduling, ...) runs this one instead and
// enables ThinLVM in the same profile, or uses deploy/'s thinlvm-scheduler
// profile as the other minors' builds do. Build it with -tags k8s1.34.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // the REST client's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/scheduler-plugins/pkg/capacityscheduling"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
	"sigs.k8s.io/scheduler-plugins/pkg/networkaware/networkoverhead"
	"sigs.k8s.io/scheduler-plugins/pkg/networkaware/topologicalsort"
	"sigs.k8s.io/scheduler-plugins/pkg/noderesources"
	"sigs.k8s.io/scheduler-plugins/pkg/noderesourcetopology"
	"sigs.k8s.io/scheduler-plugins/pkg/podstate"
	"sigs.k8s.io/scheduler-plugins/pkg/preemptiontoleration"
	"sigs.k8s.io/scheduler-plugins/pkg/qos"
	"sigs.k8s.io/scheduler-plugins/pkg/sysched"
	"sigs.k8s.io/scheduler-plugins/pkg/trimaran/loadvariationriskbalancing"
	"sigs.k8s.io/scheduler-plugins/pkg/trimaran/lowriskovercommitment"
	"sigs.k8s.io/scheduler-plugins/pkg/trimaran/peaks"
	"sigs.k8s.io/scheduler-plugins/pkg/trimaran/targetloadpacking"

	_ "github.com/thinlvm/thinlvm/scheduler/apis/config/scheme" // ThinLVMArgs
	"github.com/thinlvm/thinlvm/scheduler/plugin"
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme" // scheduler-plugins' args
)

// plugins are the out-of-tree plugins this scheduler knows: ThinLVM and
// the ones scheduler-plugins' own scheduler registers (its
// cmd/scheduler/main.go at the pinned release).
var plugins = frameworkruntime.Registry{
	plugin.Name:                     plugin.New,
	capacityscheduling.Name:         capacityscheduling.New,
	coscheduling.Name:               coscheduling.New,
	loadvariationriskbalancing.Name: loadvariationriskbalancing.New,
	networkoverhead.Name:            networkoverhead.New,
	topologicalsort.Name:            topologicalsort.New,
	noderesources.AllocatableName:   noderesources.NewAllocatable,
	noderesourcetopology.Name:       noderesourcetopology.New,
	preemptiontoleration.Name:       preemptiontoleration.New,
	targetloadpacking.Name:          targetloadpacking.New,
	lowriskovercommitment.Name:      lowriskovercommitment.New,
	sysched.Name:                    sysched.New,
	peaks.Name:                      peaks.New,
	podstate.Name:                   podstate.New,
	qos.Name:                        qos.New,
}

func main() {
	var opts []app.Option
	for name, factory := range plugins {
		opts = append(opts, app.WithPlugin(name, factory))
	}
	os.Exit(cli.Run(app.NewSchedulerCommand(opts...)))
}
