// Command thinlvm-node is thinlvm's node agent: it reconciles its node's
// LogicalVolumes through lvmd, keeps its golden bases, publishes the node's
// LVMNode, and serves the CSI Identity and Node services.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"strings"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/cmd/internal/endpoint"
	"github.com/thinlvm/thinlvm/cmd/internal/manager"
	"github.com/thinlvm/thinlvm/internal/csiidentity"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/agent"
	"github.com/thinlvm/thinlvm/node/csi"
	"github.com/thinlvm/thinlvm/node/diskimage"
	"github.com/thinlvm/thinlvm/node/golden"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/lvmnode"
	"github.com/thinlvm/thinlvm/node/registration"
	"github.com/thinlvm/thinlvm/node/transfer"
	transferpb "github.com/thinlvm/thinlvm/node/transfer/proto"
)

// version is set at build time.
var version = "dev"

type options struct {
	nodeName          string
	lvmdAddress       string
	csiAddress        string
	metricsAddress    string
	metricsSecure     bool
	lvmdMetrics       string
	probeAddress      string
	controllers       bool
	publishInterval   time.Duration
	publishDrift      time.Duration
	noSpaceRetryAfter time.Duration
	qemuImg           string
	scratchDir        string
	goldenRetry       time.Duration

	transferAddress   string
	transferAdvertise string
	transferZstd      bool
	transferBases     int
	goldenPeers       bool
	namespace         string

	registrationDir string
	kubeletCSIPath  string
}

func main() {
	var o options
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "This node's name (default $NODE_NAME).")
	fs.StringVar(&o.lvmdAddress, "lvmd-address", "unix:///run/thinlvm/lvmd.sock", "lvmd's address: unix:///path or tcp://host:port.")
	fs.StringVar(&o.csiAddress, "csi-address", "unix:///var/lib/kubelet/plugins/thinlvm.io/csi.sock", "Where to serve CSI: unix:///path or tcp://host:port.")
	fs.StringVar(&o.registrationDir, "kubelet-registration-dir", "", "The kubelet's plugin registration directory (/var/lib/kubelet/plugins_registry on the host) as mounted here: the agent registers the CSI node service with the kubelet there, as csi-node-driver-registrar would; empty registers nothing.")
	fs.StringVar(&o.kubeletCSIPath, "kubelet-csi-path", "/var/lib/kubelet/plugins/thinlvm.io/csi.sock", "The CSI socket's path as the kubelet sees it on the host: what the registration tells the kubelet.")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", "0", "Prometheus metrics address; 0 disables.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers the API server authenticates and authorizes (get on the path); false serves plain HTTP to anyone (bind to localhost then).")
	fs.StringVar(&o.lvmdMetrics, "lvmd-metrics-address", "", "lvmd's metrics socket (unix:///path), served again at /metrics/lvmd behind the same checks; empty for none.")
	fs.StringVar(&o.probeAddress, "health-probe-bind-address", "0", "Health probe address; 0 disables.")
	fs.BoolVar(&o.controllers, "controllers", true, "Run the LogicalVolume reconciler and LVMNode publisher (needs the API server); false serves CSI only.")
	fs.DurationVar(&o.publishInterval, "lvmnode-interval", 2*time.Second, "Least time between two LVMNode status writes.")
	fs.DurationVar(&o.publishDrift, "lvmnode-use-interval", time.Minute, "Least time between two LVMNode status writes that change only the pools' data and metadata use (and what is available by at most 1% of a pool).")
	fs.DurationVar(&o.noSpaceRetryAfter, "no-space-retry", time.Minute, "Retry a LogicalVolume lvmd refused for lack of space after this long.")
	fs.StringVar(&o.qemuImg, "qemu-img", "qemu-img", "qemu-img binary (name in $PATH or path) that converts qcow2 golden images; qcow2 images fail without it.")
	fs.StringVar(&o.scratchDir, "scratch-dir", os.TempDir(), "Where a qcow2 golden image is kept between download and conversion.")
	fs.DurationVar(&o.goldenRetry, "golden-retry", 30*time.Second, "First wait after a failed golden base population; it doubles with each further failure, to at most 16 times this (after 4 doublings).")
	fs.StringVar(&o.transferAddress, "transfer-address", ":9443", "Where to serve the transfer endpoint other nodes' agents copy volumes from; \"0\" disables it (and copies from other nodes).")
	fs.StringVar(&o.transferAdvertise, "transfer-advertise-address", "", "The address other nodes dial, host:port; empty derives it: the listen address when it names a host, else $POD_IP with the listen port.")
	fs.IntVar(&o.transferBases, "transfer-max-base-streams", 2, "How many copies of golden bases this node sends to other nodes at once; more wait or copy from another node.")
	fs.BoolVar(&o.goldenPeers, "golden-peers", true, "Copy golden bases from nodes that hold them, and download an image from its origin only when no node does (one node at a time); false downloads on every node.")
	fs.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The agent's namespace (default $POD_NAMESPACE): it holds the Leases of downloads from images' origins, and the Secrets and ConfigMaps golden images name (pullSecret, authSecret, caConfigMap).")
	fs.BoolVar(&o.transferZstd, "transfer-compress", true, "Ask other nodes for zstd-compressed chunks when copying volumes (they send data that does not compress as it is); false on a fast network with slow CPUs.")
	klog.InitFlags(fs)
	ctrl.RegisterFlags(fs) // --kubeconfig
	printVersion := fs.Bool("version", false, "Print the version (the image's tag) and exit.")
	_ = fs.Parse(os.Args[1:])
	if *printVersion {
		fmt.Println(version)
		return
	}
	if err := run(o); err != nil {
		klog.Background().Error(err, "thinlvm-node failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(o options) error {
	if o.nodeName == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required")
	}
	logger := klog.Background().WithValues("node", o.nodeName)
	ctrl.SetLogger(logger)
	ctx := ctrl.SetupSignalHandler()

	client, conn, err := lvmd.Dial(o.lvmdAddress)
	if err != nil {
		return err
	}
	defer conn.Close()
	lis, err := endpoint.Listen(o.csiAddress)
	if err != nil {
		return err
	}
	identity := &csiidentity.Server{Version: version, Ready: func(ctx context.Context) error {
		_, err := client.GetCapacity(ctx, &pb.GetCapacityRequest{}) // ready while lvmd answers
		return err
	}}
	node := csi.NewNodeServer(o.nodeName, client, nil, nil)
	csiServer := &endpoint.Server{Listener: lis, Log: logger.WithName("csi"), Register: func(s *grpc.Server) {
		csispec.RegisterIdentityServer(s, identity)
		csispec.RegisterNodeServer(s, node)
	}}
	var reg *registration.Server
	if o.registrationDir != "" {
		reg = &registration.Server{Driver: thinlvmv1.DriverName, Dir: o.registrationDir, Endpoint: o.kubeletCSIPath,
			Log: logger.WithName("registration")}
	}
	if !o.controllers {
		g, ctx := errgroup.WithContext(ctx)
		g.Go(func() error { return csiServer.Start(ctx) })
		if reg != nil {
			g.Go(func() error { return reg.Start(ctx) })
		}
		return g.Wait()
	}

	mgr, err := manager.New(manager.Options{MetricsAddress: o.metricsAddress, MetricsSecure: o.metricsSecure,
		MetricsExtra: lvmdMetricsHandler(o.lvmdMetrics), ProbeAddress: o.probeAddress, Cache: agent.Cache(o.nodeName)})
	if err != nil {
		return err
	}
	var copier *transfer.Copier
	var endpointStatus *thinlvmv1.TransferEndpoint
	if o.transferAddress != "0" {
		ep, cert, err := serveTransfer(mgr, o, client, logger)
		if err != nil {
			return err
		}
		endpointStatus = ep
		// The endpoint's certificate is also the agent's identity at other
		// nodes' endpoints: its LVMNode publishes its fingerprint.
		copier = &transfer.Copier{Reader: mgr.GetAPIReader(), Certificate: cert, Uncompressed: !o.transferZstd}
	}
	qemuImg, err := exec.LookPath(o.qemuImg)
	if err != nil {
		logger.Info("qemu-img not found: qcow2 golden images will fail", "qemuImg", o.qemuImg)
		qemuImg = ""
	}
	var peers *transfer.Copier
	if o.goldenPeers && copier != nil {
		if o.namespace == "" {
			return errors.New("--golden-peers needs --namespace (or $POD_NAMESPACE)")
		}
		peers = copier
	}
	if err := agent.Setup(mgr, agent.Options{NodeName: o.nodeName, LVMD: client, Metrics: ctrlmetrics.Registry,
		PublishInterval: o.publishInterval, PublishDriftInterval: o.publishDrift, NoSpaceRetryAfter: o.noSpaceRetryAfter,
		Copier: copier, Peers: peers, Transfer: endpointStatus,
		Golden: &diskimage.Writer{QemuImg: qemuImg, ScratchDir: o.scratchDir,
			Credentials: golden.Credentials{Reader: mgr.GetAPIReader(), Namespace: o.namespace}},
		GoldenRetry: o.goldenRetry, Namespace: o.namespace}); err != nil {
		return err
	}
	if err := mgr.Add(csiServer); err != nil {
		return err
	}
	// The liveness probe's checks (the livenessprobe sidecar's job): the
	// CSI service answers Probe as ready, that is lvmd answers; and the
	// kubelet did not refuse the registration. lvmd gets 4 s to answer,
	// within the probe's timeoutSeconds (5, deploy/node/daemonset.yaml).
	if err := mgr.AddHealthzCheck("csi", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 4*time.Second)
		defer cancel()
		if resp, err := identity.Probe(ctx, &csispec.ProbeRequest{}); err != nil || !resp.GetReady().GetValue() {
			return fmt.Errorf("CSI Probe: not ready (lvmd does not answer)")
		}
		return nil
	}); err != nil {
		return err
	}
	// The readiness probe's check: every device class serves. A node
	// without its VG or thin pool keeps the pod out of Ready, without the
	// restarts a failing liveness probe (or an exiting lvmd) would cause;
	// the LVMNode's Ready condition says why.
	if err := mgr.AddReadyzCheck("device-classes", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 4*time.Second)
		defer cancel()
		return deviceClassesServe(ctx, client)
	}); err != nil {
		return err
	}
	if reg != nil {
		if err := mgr.Add(reg); err != nil {
			return err
		}
		if err := mgr.AddHealthzCheck("kubelet-registration", reg.Check); err != nil {
			return err
		}
	}
	logger.Info("thinlvm-node starting", "version", version)
	return mgr.Start(ctx)
}

// serveTransfer adds the transfer endpoint to mgr: a new key and
// certificate, the TLS listener, and the server with its sweep. It returns
// what the LVMNode publishes of it, and the certificate.
func serveTransfer(mgr ctrl.Manager, o options, lvmdClient lvmd.Client, logger klog.Logger) (*thinlvmv1.TransferEndpoint, tls.Certificate, error) {
	cert, fingerprint, err := transfer.NewCertificate(o.nodeName)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	lis, err := net.Listen("tcp", o.transferAddress)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("transfer endpoint: %w", err)
	}
	advertise, err := advertiseAddress(o.transferAdvertise, lis.Addr().String(), os.Getenv("POD_IP"))
	if err != nil {
		lis.Close()
		return nil, tls.Certificate{}, err
	}
	server := &transfer.Server{Reader: mgr.GetAPIReader(), LVMD: lvmdClient, NodeName: o.nodeName, Log: logger.WithName("transfer"),
		MaxBaseStreams: o.transferBases}
	if err := mgr.Add(server); err != nil { // its sweep
		lis.Close()
		return nil, tls.Certificate{}, err
	}
	if err := mgr.Add(&endpoint.Server{Listener: lis, Log: logger.WithName("transfer"),
		Options:  []grpc.ServerOption{grpc.Creds(credentials.NewTLS(transfer.ServerTLS(cert)))},
		Register: func(s *grpc.Server) { transferpb.RegisterTransferServer(s, server) }}); err != nil {
		lis.Close()
		return nil, tls.Certificate{}, err
	}
	logger.Info("transfer endpoint", "listen", lis.Addr().String(), "advertise", advertise, "certificateSHA256", fingerprint)
	return &thinlvmv1.TransferEndpoint{Address: advertise, CertificateSHA256: fingerprint}, cert, nil
}

// advertiseAddress is the transfer endpoint's address for other nodes: the
// flag's, else the listen address when it names a host, else the pod's IP
// with the listen port.
func advertiseAddress(flag, listen, podIP string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("transfer listen address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return listen, nil
	}
	if podIP == "" {
		return "", fmt.Errorf("the transfer endpoint listens on every address (%s) and $POD_IP is not set: set --transfer-advertise-address", listen)
	}
	return net.JoinHostPort(podIP, port), nil
}

// lvmdMetricsHandler serves lvmd's metrics, which lvmd serves only on a unix
// socket in the pod (lvmd imports nothing Kubernetes, so it cannot check
// callers itself), at /metrics/lvmd of the agent's metrics server, behind
// its authentication and authorization.
func lvmdMetricsHandler(addr string) map[string]http.Handler {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || path == "" {
		return nil
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.URL.Path, r.Out.URL.RawQuery = "http", "lvmd", "/metrics", ""
			r.Out.Header.Del("Authorization") // lvmd has no use for the caller's token
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}
	return map[string]http.Handler{"/metrics/lvmd": proxy}
}

// deviceClassesServe fails while lvmd does not answer or one of its device
// classes is unavailable (its volume group or thin pool missing).
func deviceClassesServe(ctx context.Context, c lvmd.Client) error {
	resp, err := c.GetCapacity(ctx, &pb.GetCapacityRequest{})
	if err != nil {
		return fmt.Errorf("lvmd: %w", err)
	}
	if why := lvmnode.Unavailable(lvmnode.DeviceClasses(resp)); why != "" {
		return errors.New(why)
	}
	return nil
}
