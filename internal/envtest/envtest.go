// Package envtest starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with thinlvm's CRDs installed, for reconciler tests. The binaries
// come from e2e/cluster/build.sh through KUBEBUILDER_ASSETS; without them
// Start fails, so that no test is skipped silently.
package envtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.Client
	env    *envtest.Environment
	// cleanups run in Stop, the last registered first.
	cleanups []func()
}

// Defer registers f to run when the API server stops, after the tests:
// MainWithManager's setup releases its fixtures (an lvmd, a server, a
// directory) so.
func (e *Env) Defer(f func()) { e.cleanups = append(e.cleanups, f) }

// Options change the API server a test starts, and its manager.
type Options struct {
	// FeatureGates is kube-apiserver's --feature-gates, e.g.
	// "CrossNamespaceVolumeDataSource=true".
	FeatureGates string
	// Manager is MainWithManager's manager's options; its Scheme and
	// Metrics are set (client-go's scheme, no metrics server).
	Manager ctrl.Options
	// BeforeManager, when set, runs on the API server before
	// MainWithManager makes its manager: CRDs its watches need.
	BeforeManager func(*Env) error
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

// MainWithManager runs a package's tests against one API server and one
// controller-runtime manager on it. setup registers the reconcilers and
// makes the fixtures before the manager starts; the manager runs until the
// tests end, and they start once its cache has synced. A test binary
// whose API server, manager or setup fails, fails.
func MainWithManager(m *testing.M, o Options, setup func(ctx context.Context, env *Env, mgr ctrl.Manager) error) {
	env, err := StartWith(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if o.BeforeManager != nil {
		err = o.BeforeManager(env)
	}
	var mgr ctrl.Manager
	if err == nil {
		mo := o.Manager
		mo.Scheme, mo.Metrics = scheme.Scheme, metricsserver.Options{BindAddress: "0"}
		mgr, err = ctrl.NewManager(env.Config, mo)
	}
	if err == nil {
		err = setup(ctx, env, mgr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		cancel()
		_ = env.Stop()
		os.Exit(1)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	mgr.GetCache().WaitForCacheSync(ctx)
	code := m.Run()
	cancel()
	<-done
	_ = env.Stop()
	os.Exit(code)
}

// Stop runs the deferred cleanups and stops the API server and etcd.
func (e *Env) Stop() error {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
	return e.env.Stop()
}

// WriteKubeconfig writes a kubeconfig of a cluster-admin user, for
// processes started beside the test (a scheduler).
func (e *Env) WriteKubeconfig(path string) error {
	return e.WriteUserKubeconfig(path, "admin", "system:masters")
}

// WriteUserKubeconfig writes a kubeconfig of the named user, member of
// groups: what RBAC lets that user do is what the API server's
// authorizer decides.
func (e *Env) WriteUserKubeconfig(path, name string, groups ...string) error {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return err
	}
	data, err := u.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
