package sanity

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	controllercsi "github.com/thinlvm/thinlvm/controller/csi"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
	"github.com/thinlvm/thinlvm/internal/csiidentity"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/lvmnode"
	"github.com/thinlvm/thinlvm/node/reconciler"
)

const nodeName = "lvmvm"

const lvmdConfig = `deviceClasses:
- name: ssd
  volumeGroup: vg0
  thinPool: pool0
  overprovisionRatio: 10
  default: true
`

func TestCSISanity(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	vm, err := lvmvm.Start(ctx, lvmvm.Options{Disks: []string{"32G"}, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	if err := vm.SetupThinPool(ctx, "/dev/vda", "vg0", "pool0", "16G", "128M"); err != nil {
		t.Fatal(err)
	}
	if err := vm.StartLVMD(ctx, lvmdConfig); err != nil {
		t.Fatal(err)
	}
	if err := vm.StartCSINode(ctx, nodeName); err != nil {
		t.Fatal(err)
	}

	// The node agent's reconciler and publisher run on the host (the VM's
	// network reaches nothing outside it) and drive lvmd through its
	// forwarded port.
	if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}); err != nil {
		t.Fatal(err)
	}
	ctrl.SetLogger(klog.Background())
	client, conn, err := lvmd.Dial("tcp://" + vm.Addr(lvmvm.LVMDPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&reconciler.LogicalVolumeReconciler{Client: mgr.GetClient(), LVMD: client, NodeName: nodeName}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(&lvmnode.Publisher{Client: mgr.GetClient(), LVMD: client, NodeName: nodeName, Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	// The controller, as thinlvm-controller serves it, and beside it the
	// VM's Node service (see nodeProxy).
	nodeConn, err := vm.DialCSI()
	if err != nil {
		t.Fatal(err)
	}
	defer nodeConn.Close()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	csispec.RegisterIdentityServer(gs, &csiidentity.Server{Version: "sanity", Controller: true})
	controller := &controllercsi.ControllerServer{Client: mgr.GetClient()}
	if err := controller.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	csispec.RegisterControllerServer(gs, controller)
	csispec.RegisterNodeServer(gs, &nodeProxy{to: csispec.NewNodeClient(nodeConn)})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	go func() { _ = mgr.Start(ctx) }()

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.IdempotentCount = 3
	// The paths are the VM's: the node service mounts there.
	cfg.TargetPath = "/tmp/csi-sanity/target"
	cfg.StagingPath = "/tmp/csi-sanity/staging"
	guest := func(argv ...string) (string, error) { return vm.Run(ctx, argv...) }
	mkdir := func(p string) (string, error) { _, err := guest("mkdir", "-p", p); return p, err }
	remove := func(p string) error { _, err := guest("rm", "-rf", p); return err }
	cfg.CreateTargetDir, cfg.CreateStagingDir = mkdir, mkdir
	cfg.RemoveTargetPath, cfg.RemoveStagingPath = remove, remove
	cfg.CheckPath = func(p string) (sanity.PathKind, error) {
		out, err := guest("stat", "-c", "%F", p)
		switch {
		case err != nil && strings.Contains(err.Error(), "No such file"):
			return sanity.PathIsNotFound, nil
		case err != nil:
			return sanity.PathIsOther, err
		case strings.Contains(out, "directory"):
			return sanity.PathIsDir, nil
		case strings.Contains(out, "regular"):
			return sanity.PathIsFile, nil
		}
		return sanity.PathIsOther, nil
	}
	// Wait until the publisher has reported capacity: CreateVolume picks a
	// node from LVMNodes.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := (&controllercsi.ControllerServer{Client: env.Client}).GetCapacity(ctx, &csispec.GetCapacityRequest{})
		if err == nil && resp.GetAvailableCapacity() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no capacity reported: %v %v", resp, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sanity.Test(t, cfg)
	if t.Failed() {
		b, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "thinlvm-node.log"))
		fmt.Fprintf(os.Stderr, "--- thinlvm-node log (tail) ---\n%s\n", tail(string(b), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
