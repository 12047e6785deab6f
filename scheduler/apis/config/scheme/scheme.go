// Package scheme registers the ThinLVM plugin args with kube-scheduler's
// configuration scheme, so that a KubeSchedulerConfiguration's pluginConfig
// decodes, defaults and converts them. Its init does only that.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubeschedulerv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
	v1 "github.com/thinlvm/thinlvm/scheduler/apis/config/v1"
)

func init() {
	// kube-scheduler decodes plugin args with its scheme and converts them
	// with a second one kept for plugin args: both must know the types.
	for _, s := range []*runtime.Scheme{kubeschedulerscheme.Scheme, kubeschedulerv1.GetPluginArgConversionScheme()} {
		utilruntime.Must(config.AddToScheme(s))
		utilruntime.Must(v1.AddToScheme(s))
	}
}
