// Package envtest starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with thinlvm's CRDs installed, for reconciler tests. The binaries
// come from e2e/cluster/build.sh through KUBEBUILDER_ASSETS; without them
// Start fails, so that no test is skipped silently.
package envtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.Client
	env    *envtest.Environment
}

// Options change the API server a test starts.
type Options struct {
	// FeatureGates is kube-apiserver's --feature-gates, e.g.
	// "CrossNamespaceVolumeDataSource=true".
	FeatureGates string
}

// Start starts etcd and kube-apiserver with the CRDs of deploy/crds, and
// registers thinlvm's types in client-go's scheme.
func Start() (*Env, error) { return StartWith(Options{}) }

// StartWith is Start with Options.
func StartWith(o Options) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with 'make test' (it builds etcd and kube-apiserver)")
	}
	_, file, _, _ := runtime.Caller(0)
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(filepath.Dir(file), "..", "..", "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	if o.FeatureGates != "" {
		env.ControlPlane.GetAPIServer().Configure().Set("feature-gates", o.FeatureGates)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	if err := thinlvmv1.AddToScheme(scheme.Scheme); err != nil {
		_ = env.Stop()
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, env: env}, nil
}

// Main runs a package's tests against one API server: set receives it
// before they run. A test binary that cannot start it fails.
func Main(m *testing.M, set func(*Env)) {
	env, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	set(env)
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// WriteKubeconfig writes a kubeconfig of a cluster-admin user, for
// processes started beside the test (a scheduler).
func (e *Env) WriteKubeconfig(path string) error {
	u, err := e.env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := u.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
