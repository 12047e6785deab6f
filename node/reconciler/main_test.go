package reconciler_test

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/internal/envtest"
)

// The reconciler runs against a real kube-apiserver and etcd.
var (
	cfg       *rest.Config
	k8sClient client.Client
)

func TestMain(m *testing.M) {
	envtest.Main(m, func(env *envtest.Env) { cfg, k8sClient = env.Config, env.Client })
}
