package reconciler_test

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/thinlvm/thinlvm/e2e/envtest"
)

// The reconciler runs against a real kube-apiserver and etcd.
var (
	cfg       *rest.Config
	k8sClient client.Client
)

func TestMain(m *testing.M) {
	env, err := envtest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	cfg, k8sClient = env.Config, env.Client
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}
