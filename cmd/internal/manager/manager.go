// Package manager sets up the controller-runtime manager the way thinlvm's
// components run one: a scheme of client-go's and thinlvm's types, the
// kubeconfig from the usual places (flag, in-cluster, $KUBECONFIG), metrics
// over HTTPS behind the API server's authentication and authorization, a
// health probe server with a liveness ping, and leader election when asked.
package manager

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Options are what differs between the components' managers.
type Options struct {
	// MetricsAddress serves metrics ("0": none); MetricsSecure puts them
	// behind HTTPS, authentication and authorization; MetricsExtra are more
	// paths served there.
	MetricsAddress string
	MetricsSecure  bool
	MetricsExtra   map[string]http.Handler
	// ProbeAddress serves /healthz and /readyz ("0": none).
	ProbeAddress string
	// LeaderElectionID, when set, runs the leader-election runnables only
	// while this process holds that lease in LeaderElectionNamespace.
	LeaderElectionID        string
	LeaderElectionNamespace string
	// Cache narrows what the manager's cache holds (the node agent's holds
	// only its node's objects).
	Cache cache.Options
}

// New makes the manager, with a liveness check that answers while the
// process runs.
func New(o Options) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := thinlvmv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   o.Cache,
		Metrics:                 metricsOptions(o.MetricsAddress, o.MetricsSecure, o.MetricsExtra),
		HealthProbeBindAddress:  o.ProbeAddress,
		LeaderElection:          o.LeaderElectionID != "",
		LeaderElectionID:        o.LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
