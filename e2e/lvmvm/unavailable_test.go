package lvmvm

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// The lvmd of TestDeviceClassAppears, beside the suite's: its guest ports,
// and its classes: late on vglate, which the test makes on /dev/vdl midway,
// and the suite's delta class (read only here; configured as the suite's
// lvmd has it, so that the two set the pool alike).
const (
	latePort        = 7201
	lateMetricsPort = 7202
	lateConfig      = `deviceClasses:
- name: late
  volumeGroup: vglate
  thinPool: pool
  overprovisionRatio: 10
- name: delta
  volumeGroup: vg-delta
  thinPool: thin-pool
  overprovisionRatio: 10
`
)

// A node whose VG is not there yet: lvmd starts and serves the other
// class, reports late unavailable and refuses it (FailedPrecondition, no
// LV made); once an administrator makes the VG and pool, a refresh finds
// them and late serves, without a restart. Real lvm refuses a whole report
// that names a missing VG: each runner reads that refusal (make test-lvm-exec
// runs this test too).
func TestDeviceClassAppears(t *testing.T) {
	ctx := testContext(t)
	in, err := testVM.StartLVMDInstance(ctx, "lvmd-late", latePort, lateMetricsPort, lateConfig,
		"--lvm-runner", *lvmRunner, "--refresh-interval", "1s")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := in.Stop(context.Background(), syscall.SIGTERM); err != nil {
			t.Error(err)
		}
	}()
	conn, err := in.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lateLVs, lateVGs := pb.NewLVServiceClient(conn), pb.NewVGServiceClient(conn)
	classes := func() map[string]*pb.DeviceClassCapacity {
		t.Helper()
		resp, err := lateVGs.GetCapacity(ctx, &pb.GetCapacityRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*pb.DeviceClassCapacity{}
		for _, c := range resp.GetDeviceClasses() {
			out[c.GetDeviceClass()] = c
		}
		return out
	}
	availableGauge := func() float64 {
		t.Helper()
		fams, err := in.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return classGauge(t, fams, "thinlvm_lvmd_device_class_available", "late")
	}

	c := classes()
	if got := c["late"].GetUnavailable(); got != "volume group vglate not found" || c["late"].GetAvailableBytes() != 0 {
		t.Fatalf("late before its VG: unavailable %q, %d bytes available; want the missing VG and none", got, c["late"].GetAvailableBytes())
	}
	if c["delta"].GetUnavailable() != "" || c["delta"].GetThinPoolSizeBytes() == 0 {
		t.Errorf("delta beside a missing VG: unavailable %q, pool %d bytes; want it served", c["delta"].GetUnavailable(), c["delta"].GetThinPoolSizeBytes())
	}
	if g := availableGauge(); g != 0 {
		t.Errorf("device_class_available{late} %v before its VG, want 0", g)
	}
	_, err = lateLVs.CreateLV(ctx, &pb.CreateLVRequest{Name: "late0", DeviceClass: "late", SizeBytes: 16 * mib})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "volume group vglate not found") {
		t.Fatalf("CreateLV in late before its VG: %v, want FailedPrecondition naming the VG", err)
	}
	// The reason tells this refusal from a foreign LV's: the node agent
	// retries it (DeviceClassUnavailable), and never a foreign LV.
	if r := pb.ReasonOf(err); r != pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE {
		t.Errorf("CreateLV in late before its VG: reason %v, want %v", r, pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE)
	}

	if err := testVM.SetupThinPool(ctx, "/dev/vdl", "vglate", "pool", "32M", "4M"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() string {
		if l := classes()["late"]; l.GetUnavailable() != "" || l.GetAvailableBytes() == 0 {
			return fmt.Sprintf("late after its VG was made: unavailable %q, %d bytes available", l.GetUnavailable(), l.GetAvailableBytes())
		}
		return ""
	})
	if g := availableGauge(); g != 1 {
		t.Errorf("device_class_available{late} %v once its VG is there, want 1", g)
	}
	if _, err := lateLVs.CreateLV(ctx, &pb.CreateLVRequest{Name: "late0", DeviceClass: "late", SizeBytes: 16 * mib}); err != nil {
		t.Fatalf("CreateLV in late once its VG is there: %v", err)
	}
	if lv, ok := lvsOf(t, ctx, "vglate")["late0"]; !ok || lv.size != 16*mib {
		t.Errorf("vglate/late0 after CreateLV: %+v (present %t), want 16 MiB", lv, ok)
	}
	if _, err := lateLVs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "late0", DeviceClass: "late"}); err != nil {
		t.Fatal(err)
	}
}
