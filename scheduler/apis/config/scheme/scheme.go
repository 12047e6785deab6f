// Package scheme registers the ThinLVM plugin args with kube-scheduler's
// configuration scheme, so that a KubeSchedulerConfiguration's pluginConfig
// decodes, defaults and converts them. Its init does only that.
package scheme

import (
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerconfigv1 "k8s.io/kube-scheduler/config/v1"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
	v1 "github.com/thinlvm/thinlvm/scheduler/apis/config/v1"
)

func init() {
	// kube-scheduler decodes a configuration with its scheme, made when
	// its package initialized (before this one): register there. It then
	// converts plugin args with a second scheme that it builds on first
	// use from the scheme builders of its internal and v1 config packages:
	// register with those builders, as scheduler-plugins' args do. Building
	// that scheme here instead (GetPluginArgConversionScheme) would leave
	// out the args of every plugin whose package initializes after this
	// one: in the 1.34 build, scheduler-plugins' (Coscheduling's args
	// failed to convert).
	utilruntime.Must(config.AddToScheme(kubeschedulerscheme.Scheme))
	utilruntime.Must(v1.AddToScheme(kubeschedulerscheme.Scheme))
	kubeschedulerconfig.SchemeBuilder.Register(config.AddToScheme)
	kubeschedulerconfigv1.SchemeBuilder.Register(v1.AddToScheme)
}
