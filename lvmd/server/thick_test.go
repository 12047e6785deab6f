package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// thickEnv serves testConfig's classes and a thick class "thick" on vg1
// (3 GiB free, 1 GiB of it spare), beside the thin pool tp.
func thickEnv(t *testing.T) *env {
	t.Helper()
	cfg := testConfig()
	cfg.DeviceClasses[1].AutoExtend = nil // tp may not take vg1's free space
	cfg.DeviceClasses = append(cfg.DeviceClasses, config.DeviceClass{Name: "thick", Type: config.Thick, VolumeGroup: "vg1", SpareGB: 1})
	cfg.Default()
	return newEnv(t, cfg, testRunner(), envOptions{})
}

func wantRefusal(t *testing.T, err error, code codes.Code, reason pb.ErrorReason, fragment string) {
	t.Helper()
	if status.Code(err) != code || pb.ReasonOf(err) != reason || !strings.Contains(status.Convert(err).Message(), fragment) {
		t.Fatalf("error %v (reason %v), want %v, %v, with %q", err, pb.ReasonOf(err), code, reason, fragment)
	}
}

func thickCapacityOf(t *testing.T, e *env) *pb.DeviceClassCapacity {
	t.Helper()
	e.settle(t)
	resp, err := e.vg.GetCapacity(context.Background(), &pb.GetCapacityRequest{DeviceClass: "thick"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetDeviceClasses()[0]
}

func TestThickClass(t *testing.T) {
	ctx := context.Background()
	e := thickEnv(t)

	c := thickCapacityOf(t, e)
	if c.GetType() != "thick" || c.GetAvailableBytes() != 2*gib || c.GetThinPool() != "" || c.GetVgFreeBytes() != 3*gib || c.GetUnavailable() != "" {
		t.Fatalf("empty thick class: %v; want type thick, 2 GiB available (3 free less 1 spare)", c)
	}

	// A thick LV takes its extents from the VG at once.
	resp, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "pvc-1", DeviceClass: "thick", SizeBytes: gib, Tags: []string{"lv:pvc-1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := thinLV("thick", "vg1", "pvc-1", gib, "lv:pvc-1")
	want.Thick = true
	diffLV(t, want, resp.GetVolume())
	if got := e.fake.Calls()[len(e.fake.Calls())-1]; !slices.Contains(got, "--size") || slices.Contains(got, "--thin") || got[len(got)-1] != "vg1" {
		t.Errorf("lvcreate %q: want a linear LV of vg1", got)
	}
	// The same again is the same LV; another size is a conflict.
	if _, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "pvc-1", DeviceClass: "thick", SizeBytes: gib}); err != nil {
		t.Errorf("idempotent create: %v", err)
	}
	_, err = e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "pvc-1", DeviceClass: "thick", SizeBytes: 2 * gib})
	wantRefusal(t, err, codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICT, "exists with size")
	c = thickCapacityOf(t, e)
	if c.GetAvailableBytes() != gib || c.GetVirtualBytes() != gib || c.GetLvCount() != 1 {
		t.Errorf("capacity after 1 GiB: %v; want 1 GiB available, 1 GiB in 1 LV", c)
	}
	// A thin LV of vg1's pool is not the thick class's.
	if _, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "thin-1", DeviceClass: "hdd", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	_, err = e.lv.GetLV(ctx, &pb.GetLVRequest{Name: "thin-1", DeviceClass: "thick"})
	wantRefusal(t, err, codes.NotFound, pb.ErrorReason_ERROR_REASON_NOT_FOUND, "thin-1")

	// No room: ResourceExhausted, nothing made.
	_, err = e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "big", DeviceClass: "thick", SizeBytes: gib + 1})
	wantRefusal(t, err, codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_INSUFFICIENT_SPACE, "kept spare")
	_, err = e.lv.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "pvc-1", DeviceClass: "thick", SizeBytes: 3 * gib})
	wantRefusal(t, err, codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_INSUFFICIENT_SPACE, "kept spare")

	// Growing takes the rest; shrinking is OutOfRange.
	if resp, err := e.lv.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "pvc-1", DeviceClass: "thick", SizeBytes: 2 * gib}); err != nil || resp.GetVolume().GetSizeBytes() != 2*gib {
		t.Fatalf("resize to 2 GiB: %v, %v", resp, err)
	}
	_, err = e.lv.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "pvc-1", DeviceClass: "thick", SizeBytes: gib})
	wantRefusal(t, err, codes.OutOfRange, pb.ErrorReason_ERROR_REASON_SHRINK, "only grow")
	if c := thickCapacityOf(t, e); c.GetAvailableBytes() != 0 || c.GetVgFreeBytes() != gib {
		t.Errorf("capacity after growing to 2 GiB: %v; want nothing available, 1 GiB free (the spare)", c)
	}

	// Snapshots are refused, before any command.
	before := e.fake.Count("lvcreate")
	for _, req := range []*pb.CreateSnapshotRequest{
		{Name: "snap", DeviceClass: "thick", SourceName: "pvc-1", ReadOnly: true},
		{Name: "clone", DeviceClass: "thick", SourceName: "pvc-1"},
	} {
		_, err = e.lv.CreateSnapshot(ctx, req)
		wantRefusal(t, err, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_THICK, "device class thick is thick")
	}
	if n := e.fake.Count("lvcreate"); n != before {
		t.Errorf("%d lvcreate after refused snapshots, want %d", n, before)
	}

	// The delta of a thick LV is all of it.
	d, err := e.lv.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "pvc-1", DeviceClass: "thick"})
	if err != nil {
		t.Fatal(err)
	}
	if rs := d.GetRanges(); d.GetSizeBytes() != 2*gib || len(rs) != 1 || rs[0].GetOffsetBytes() != 0 || rs[0].GetLengthBytes() != 2*gib || rs[0].GetZero() {
		t.Errorf("delta of a thick LV: %v; want one range, the whole 2 GiB", d)
	}
	_, err = e.lv.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "pvc-1", DeviceClass: "thick", BaseName: "thin-1"})
	wantRefusal(t, err, codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID, "no base")

	// Removing gives the extents back.
	if _, err := e.lv.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "pvc-1", DeviceClass: "thick"}); err != nil {
		t.Fatal(err)
	}
	if c := thickCapacityOf(t, e); c.GetAvailableBytes() != 2*gib || c.GetLvCount() != 0 {
		t.Errorf("capacity after the removal: %v; want 2 GiB available, no LV", c)
	}
}

// A copy reads a thick LV through a transient copy-on-write snapshot: as
// large as its source while the class has the room, else what room there
// is, and none at all is ResourceExhausted.
func TestThickTransientSnapshot(t *testing.T) {
	ctx := context.Background()
	e := thickEnv(t)
	if _, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "src", DeviceClass: "thick", SizeBytes: gib / 2}); err != nil {
		t.Fatal(err)
	}
	transient := func(name, src string) (*pb.LogicalVolume, error) {
		resp, err := e.lv.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name, DeviceClass: "thick", SourceName: src,
			ReadOnly: true, Transient: true, Tags: []string{"transfer:x"}})
		return resp.GetVolume(), err
	}
	snap, err := transient("t1", "src")
	if err != nil {
		t.Fatal(err)
	}
	if !snap.GetReadOnly() || snap.GetOrigin() != "src" || snap.GetSizeBytes() != gib/2 || !snap.GetThick() {
		t.Errorf("transient snapshot %v: want read-only, of src, its 512 MiB", snap)
	}
	// 512 MiB, its metadata (1/128: 4 MiB) and an extent.
	if call := e.fake.Calls()[len(e.fake.Calls())-1]; !slices.Contains(call, "--snapshot") || call[slices.Index(call, "--size")+1] != "545259520b" {
		t.Errorf("lvcreate %q: want a copy-on-write store of the source's size and its metadata, 520 MiB", call)
	}
	if again, err := transient("t1", "src"); err != nil || again.GetName() != "t1" {
		t.Errorf("the same snapshot again: %v, %v", again, err)
	}
	// Lvm reports the store's size; readers see the source's.
	e.settle(t)
	got, err := e.lv.GetLV(ctx, &pb.GetLVRequest{Name: "t1", DeviceClass: "thick"})
	if err != nil || got.GetVolume().GetSizeBytes() != gib/2 {
		t.Errorf("GetLV of the snapshot after a refresh: %v, %v; want 512 MiB", got, err)
	}
	d, err := e.lv.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "t1", DeviceClass: "thick"})
	if err != nil || d.GetSizeBytes() != gib/2 || len(d.GetRanges()) != 1 || d.GetRanges()[0].GetLengthBytes() != gib/2 {
		t.Errorf("delta of the snapshot: %v, %v; want the whole 512 MiB", d, err)
	}

	// 3 GiB less 512 MiB, the 520 MiB store, 768 MiB and the 1 GiB spare: a
	// 768 MiB source's store gets the 248 MiB left.
	if _, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "big", DeviceClass: "thick", SizeBytes: 768 * mib}); err != nil {
		t.Fatal(err)
	}
	if _, err := transient("t2", "big"); err != nil {
		t.Fatal(err)
	}
	if call := e.fake.Calls()[len(e.fake.Calls())-1]; call[slices.Index(call, "--size")+1] != "260046848b" {
		t.Errorf("lvcreate %q: want a store of the 248 MiB of room", call)
	}
	// No room left at all.
	before := e.fake.Count("lvcreate")
	_, err = transient("t3", "src")
	wantRefusal(t, err, codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_INSUFFICIENT_SPACE, "copy-on-write store")
	if n := e.fake.Count("lvcreate"); n != before {
		t.Errorf("lvcreate ran for a refused snapshot")
	}

	// Removing the snapshots gives their stores back.
	for _, n := range []string{"t1", "t2"} {
		if _, err := e.lv.RemoveLV(ctx, &pb.RemoveLVRequest{Name: n, DeviceClass: "thick"}); err != nil {
			t.Fatal(err)
		}
	}
	if c := thickCapacityOf(t, e); c.GetAvailableBytes() != 768*mib {
		t.Errorf("available after the snapshots went: %d, want 768 MiB", c.GetAvailableBytes())
	}
}

// A thick class serves without a thin pool, and one whose VG is missing is
// unavailable like a thin one.
func TestThickClassUnavailable(t *testing.T) {
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{{Name: "thick", Type: config.Thick, VolumeGroup: "vg9"}}}
	cfg.Default()
	e := newEnv(t, cfg, &fake.Runner{VGs: []fake.VG{{Name: "vg0", Size: gib, Free: gib}}}, envOptions{})
	c := thickCapacityOf(t, e)
	if c.GetUnavailable() != "volume group vg9 not found" || c.GetAvailableBytes() != 0 {
		t.Errorf("capacity %v: want unavailable, the VG not found", c)
	}
	_, err := e.lv.CreateLV(context.Background(), &pb.CreateLVRequest{Name: "a", DeviceClass: "thick", SizeBytes: gib})
	wantRefusal(t, err, codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE, "vg9")
}
