package lvmvm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

func TestIdempotencyAndCodes(t *testing.T) {
	ctx := testContext(t)
	first, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "idem", SizeBytes: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	again, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "idem", SizeBytes: 64 * mib})
	if err != nil {
		t.Fatalf("repeated CreateLV: %v", err)
	}
	ignoreVolatile := protocmp.IgnoreFields(&pb.LogicalVolume{}, "uuid")
	if d := cmp.Diff(first.GetVolume(), again.GetVolume(), protocmp.Transform(), ignoreVolatile); d != "" {
		t.Errorf("repeated CreateLV returned another volume (-first +again):\n%s", d)
	}
	if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "idem-snap", SourceName: "idem"}); err != nil {
		t.Fatal(err)
	}
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "idem-other", SizeBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "idem-snap", SourceName: "idem"}); err != nil {
		t.Fatalf("repeated CreateSnapshot: %v", err)
	}
	if _, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "idem", SizeBytes: 64 * mib}); err != nil {
		t.Fatalf("ResizeLV to the same size: %v", err)
	}
	// An LV lvmd does not own: made by hand, without the thinlvm tag.
	if _, err := testVM.Run(ctx, "lvm", "lvcreate", "--thin", "vg0/pool0", "--virtualsize", "8m", "--name", "foreign"); err != nil {
		t.Fatal(err)
	}
	// The cached report learns of it at the next refresh; the create path
	// must find it even before that.

	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"create same name other size", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "idem", SizeBytes: 128 * mib})
			return err
		}, codes.AlreadyExists},
		{"create plain over a snapshot", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "idem-snap", SizeBytes: 64 * mib})
			return err
		}, codes.AlreadyExists},
		{"snapshot same name other source", func() error {
			_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "idem-snap", SourceName: "idem-other"})
			return err
		}, codes.AlreadyExists},
		{"snapshot same name read-only differs", func() error {
			_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "idem-snap", SourceName: "idem", ReadOnly: true})
			return err
		}, codes.AlreadyExists},
		{"create over a foreign lv", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "foreign", SizeBytes: 8 * mib})
			return err
		}, codes.AlreadyExists},
		{"remove a foreign lv", func() error {
			_, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "foreign"})
			return err
		}, codes.FailedPrecondition},
		{"get a foreign lv", func() error {
			_, err := lvs.GetLV(ctx, &pb.GetLVRequest{Name: "foreign"})
			return err
		}, codes.NotFound},
		{"unknown device class", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "x", DeviceClass: "nvme", SizeBytes: mib})
			return err
		}, codes.InvalidArgument},
		{"invalid lv name", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "bad/name", SizeBytes: mib})
			return err
		}, codes.InvalidArgument},
		{"reserved lv name", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "x_tmeta", SizeBytes: mib})
			return err
		}, codes.InvalidArgument},
		{"option-like lv name", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "--help", SizeBytes: mib})
			return err
		}, codes.InvalidArgument},
		{"invalid tag", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "x", SizeBytes: mib, Tags: []string{"a b"}})
			return err
		}, codes.InvalidArgument},
		{"zero size", func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "x", SizeBytes: 0})
			return err
		}, codes.InvalidArgument},
		{"shrink", func() error {
			_, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "idem", SizeBytes: 32 * mib})
			return err
		}, codes.OutOfRange},
		{"resize missing", func() error {
			_, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "missing", SizeBytes: 32 * mib})
			return err
		}, codes.NotFound},
		{"get missing", func() error {
			_, err := lvs.GetLV(ctx, &pb.GetLVRequest{Name: "missing"})
			return err
		}, codes.NotFound},
		{"remove missing", func() error {
			_, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "missing"})
			return err
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.want) })
	}

	got := lvsOf(t, ctx, "vg0")
	for _, name := range []string{"x", "x_tmeta", "missing"} {
		if _, ok := got[name]; ok {
			t.Errorf("a refused request left lv %s behind", name)
		}
	}
	if got["idem"].size != 64*mib {
		t.Errorf("idem is %d bytes after refused requests, want %d", got["idem"].size, 64*mib)
	}
	if _, ok := got["foreign"]; !ok {
		t.Error("lvmd removed an LV it does not own")
	}
	list, err := lvs.ListLVs(ctx, &pb.ListLVsRequest{DeviceClass: "ssd"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list.GetVolumes() {
		if v.GetName() == "foreign" {
			t.Error("ListLVs shows an LV without the thinlvm tag")
		}
	}
	for _, name := range []string{"idem-snap", "idem", "idem-other", "idem-snap"} { // the second remove is a no-op
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name}); err != nil {
			t.Fatalf("remove %s: %v", name, err)
		}
	}
	if _, err := testVM.Run(ctx, "lvm", "lvremove", "--yes", "vg0/foreign"); err != nil {
		t.Fatal(err)
	}
}
