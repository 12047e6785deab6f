package lvmvm

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// The VM is booted once per package run; every test and benchmark shares
// it, each on its own device class.
var (
	testVM   *VM
	lvmdConn *grpc.ClientConn
	lvs      pb.LVServiceClient
	vgs      pb.VGServiceClient
	csiConn  *grpc.ClientConn
	csiNode  csi.NodeClient
)

// lvmdConfig is the device classes of the test lvmd: one VG and thin pool
// per disk, so that tests of a full pool do not disturb the others; and a
// thick class beside ssd's pool in vg0.
const lvmdConfig = `deviceClasses:
- name: ssd
  volumeGroup: vg0
  thinPool: pool0
  overprovisionRatio: 4
  default: true
- name: small
  volumeGroup: vgsmall
  thinPool: pool
  overprovisionRatio: 10
  dataHighWatermarkPercent: 80
- name: grow
  volumeGroup: vggrow
  thinPool: pool
  overprovisionRatio: 10
  autoExtend: {thresholdPercent: 60, percent: 100}
- name: bench
  volumeGroup: vgbench
  thinPool: pool
  overprovisionRatio: 10
- name: full
  volumeGroup: vgfull
  thinPool: pool
  overprovisionRatio: 10
- name: burst
  volumeGroup: vgburst
  thinPool: pool
  overprovisionRatio: 10
  autoExtend: {thresholdPercent: 50, percent: 100}
- name: meta
  volumeGroup: vgmeta
  thinPool: pool
  overprovisionRatio: 10
- name: delta
  volumeGroup: vg-delta
  thinPool: thin-pool
  overprovisionRatio: 10
- name: thick
  type: thick
  volumeGroup: vg0
  spareGB: 1
` + vgMetadataClasses

// lvmRunner is how the test lvmd runs lvm (its --lvm-runner): make test-lvm
// runs the suite once with each.
var lvmRunner = flag.String("lvmvm.runner", "shell", "lvmd's --lvm-runner for the suite: shell or exec.")

// startLVMD (re)starts the test lvmd with the suite's runner.
func startLVMD(ctx context.Context, extraArgs ...string) error {
	return testVM.StartLVMD(ctx, lvmdConfig, append([]string{"--lvm-runner", *lvmRunner}, extraArgs...)...)
}

func TestMain(m *testing.M) {
	flag.Parse()
	if *lvmRunner != "shell" && *lvmRunner != "exec" {
		fmt.Fprintf(os.Stderr, "FAIL: -lvmvm.runner=%q: want shell or exec\n", *lvmRunner)
		os.Exit(2)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	// /dev/vdl (64M) stays empty: TestDeviceClassAppears makes its VG.
	testVM, err = Start(ctx, Options{Disks: []string{"16G", "1G", "1G", "16G", "96M", "256M", "1G", "3G", "1G", "256M", "4G", "64M"},
		GuestPorts: []int{latePort, lateMetricsPort}, Log: os.Stderr})
	if err != nil {
		// No skip: a machine that cannot boot the VM fails the suite.
		fmt.Fprintf(os.Stderr, "FAIL: boot the real-LVM VM: %v\n", err)
		return 1
	}
	defer testVM.Stop()
	for _, p := range []struct{ disk, vg, pool, size, meta string }{
		{"/dev/vda", "vg0", "pool0", "4G", "64M"},
		{"/dev/vdb", "vgsmall", "pool", "64M", "4M"},
		{"/dev/vdc", "vggrow", "pool", "64M", "4M"},
		{"/dev/vdd", "vgbench", "pool", "8G", "64M"},
		// Nearly all of its 96 MiB disk: filled, then grown onto /dev/vdf.
		{"/dev/vde", "vgfull", "pool", "64M", "4M"},
		{"/dev/vdg", "vgburst", "pool", "64M", "4M"},
	} {
		if err := testVM.SetupThinPool(ctx, p.disk, p.vg, p.pool, p.size, p.meta); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: set up %s: %v\n", p.vg, err)
			return 1
		}
	}
	// The smallest metadata lvm makes (2 MiB, hence 1 MiB extents) for a
	// 2 GiB pool of 64 KiB chunks: filled by TestPoolMetadataFull.
	for _, argv := range [][]string{
		{"lvm", "pvcreate", "--yes", "/dev/vdh"},
		{"lvm", "vgcreate", "--physicalextentsize", "1M", "vgmeta", "/dev/vdh"},
		{"lvm", "lvcreate", "--yes", "--type", "thin-pool", "--size", "2G", "--poolmetadatasize", "2M", "--chunksize", "64k", "--name", "pool", "vgmeta"},
		// '-' in the names: device-mapper doubles them (TestGetThinDelta).
		{"lvm", "pvcreate", "--yes", "/dev/vdi"},
		{"lvm", "vgcreate", "vg-delta", "/dev/vdi"},
		{"lvm", "lvcreate", "--yes", "--type", "thin-pool", "--size", "512M", "--poolmetadatasize", "8M", "--chunksize", "64k", "--name", "thin-pool", "vg-delta"},
	} {
		if _, err := testVM.Run(ctx, argv...); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: set up vgmeta and vg-delta: %v\n", err)
			return 1
		}
	}
	if err := setupVGMetadata(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: set up vgmda and vgdense: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "lvmvm: lvmd runs lvm with --lvm-runner=%s\n", *lvmRunner)
	if err := startLVMD(ctx, "--refresh-interval", "2s", "-v", "3"); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start lvmd: %v\n", err)
		return 1
	}
	lvmdConn, err = testVM.DialLVMD()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: dial lvmd: %v\n", err)
		return 1
	}
	defer lvmdConn.Close()
	lvs, vgs = pb.NewLVServiceClient(lvmdConn), pb.NewVGServiceClient(lvmdConn)
	if err := testVM.StartCSINode(ctx, "lvmvm"); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start the CSI node service: %v\n", err)
		return 1
	}
	csiConn, err = testVM.DialCSI()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: dial csi: %v\n", err)
		return 1
	}
	defer csiConn.Close()
	csiNode = csi.NewNodeClient(csiConn)
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- lvmd log (tail) ---\n%s\n", tail(testVM.LVMDLog(), 6000))
	}
	return code
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
