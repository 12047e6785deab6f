// Command thinlvm-controller is thinlvm's controller: the CSI Controller
// service (volumes and snapshots as LogicalVolumes) for the CSI sidecars,
// the populator of claims whose dataSourceRef names a GoldenImage or a
// GoldenImageChannel, and the cleanup after deleted nodes.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/cmd/internal/endpoint"
	"github.com/thinlvm/thinlvm/cmd/internal/manager"
	"github.com/thinlvm/thinlvm/controller/csi"
	"github.com/thinlvm/thinlvm/controller/populator"
	"github.com/thinlvm/thinlvm/controller/reconciler"
	"github.com/thinlvm/thinlvm/internal/csiidentity"
)

var version = "dev"

type options struct {
	csiAddress     string
	metricsAddress string
	metricsSecure  bool
	probeAddress   string
	leaderElect    bool
	leaderNS       string
	nodeCleanup    bool
	waitTimeout    time.Duration
	namespace      string
}

func main() {
	var o options
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	fs.StringVar(&o.csiAddress, "csi-address", "unix:///run/csi/csi.sock", "Where to serve CSI: unix:///path or tcp://host:port.")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", ":8080", "Prometheus metrics address; 0 disables.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers the API server authenticates and authorizes (get on the path); false serves plain HTTP to anyone (bind to localhost then).")
	fs.StringVar(&o.probeAddress, "health-probe-bind-address", ":8081", "Health probe address; 0 disables.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader among replicas for the node cleanup.")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the leader election lease (default: in-cluster namespace).")
	fs.BoolVar(&o.nodeCleanup, "node-cleanup", true, "Delete the PVCs and LogicalVolumes of deleted Nodes.")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 2*time.Minute, "How long a CSI call without a deadline waits for the node agent.")
	fs.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The controller's own namespace (default $POD_NAMESPACE), where the populator makes the claims that populate claims from a GoldenImage or GoldenImageChannel; only claims there have their "+thinlvmv1.PopulateGoldenImageAnnotation+" annotation honoured. Empty turns the populator off.")
	klog.InitFlags(fs)
	ctrl.RegisterFlags(fs)
	printVersion := fs.Bool("version", false, "Print the version (the image's tag) and exit.")
	_ = fs.Parse(os.Args[1:])
	if *printVersion {
		fmt.Println(version)
		return
	}
	if err := run(o); err != nil {
		klog.Background().Error(err, "thinlvm-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(o options) error {
	logger := klog.Background()
	ctrl.SetLogger(logger)
	ctx := ctrl.SetupSignalHandler()
	mo := manager.Options{MetricsAddress: o.metricsAddress, MetricsSecure: o.metricsSecure, ProbeAddress: o.probeAddress}
	if o.leaderElect {
		mo.LeaderElectionID, mo.LeaderElectionNamespace = "thinlvm-controller", o.leaderNS
	}
	mgr, err := manager.New(mo)
	if err != nil {
		return err
	}
	if o.nodeCleanup {
		if err := (&reconciler.NodeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if err := (&reconciler.GoldenImageReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&reconciler.GoldenImageChannelReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("thinlvm-controller")}).SetupWithManager(mgr); err != nil {
		return err
	}
	if o.namespace != "" {
		if err := (&populator.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Recorder: mgr.GetEventRecorder("thinlvm-controller"), Namespace: o.namespace}).SetupWithManager(mgr); err != nil {
			return err
		}
	} else {
		logger.Info("no namespace (--namespace, $POD_NAMESPACE): claims whose dataSourceRef names a GoldenImage or GoldenImageChannel are not populated")
	}
	lis, err := endpoint.Listen(o.csiAddress)
	if err != nil {
		return err
	}
	controller := &csi.ControllerServer{Client: mgr.GetClient(), Timeout: o.waitTimeout, Metrics: csi.NewMetrics(ctrlmetrics.Registry),
		Recorder: mgr.GetEventRecorder("thinlvm-controller"), APIReader: mgr.GetAPIReader(), Namespace: o.namespace}
	if err := controller.SetupWithManager(mgr); err != nil {
		return err
	}
	csi.NewPhaseCollector(ctrlmetrics.Registry, mgr.GetClient())
	identity := &csiidentity.Server{Version: version, Controller: true}
	if err := mgr.Add(&endpoint.Server{Listener: lis, Log: logger.WithName("csi"), Register: func(s *grpc.Server) {
		csispec.RegisterIdentityServer(s, identity)
		csispec.RegisterControllerServer(s, controller)
	}}); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("cache not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	logger.Info("thinlvm-controller starting", "version", version)
	return mgr.Start(ctx)
}
