package lvmvm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// deltaBlock is the chunk size of vg-delta/thin-pool (main_test.go).
const deltaBlock = 64 << 10

// ddBlocks writes n blocks of random data at block b of a guest device.
func ddBlocks(t *testing.T, dev string, b, n uint64) {
	t.Helper()
	if _, err := testVM.Run(testContext(t), "dd", "if=/dev/urandom", "of="+dev, "bs=64k", fmt.Sprintf("seek=%d", b),
		fmt.Sprintf("count=%d", n), "oflag=direct", "conv=fsync", "status=none"); err != nil {
		t.Fatal(err)
	}
}

// heldMetadataSnap is the held metadata root field of a thin pool's
// status line ("-" for none): `<start> <len> thin-pool <transaction id>
// <used>/<total metadata> <used>/<total data> <held root> ...`.
func heldMetadataSnap(t *testing.T, dmName string) string {
	t.Helper()
	out, err := testVM.Run(testContext(t), "dmsetup", "status", dmName)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) < 7 || f[2] != "thin-pool" {
		t.Fatalf("dmsetup status %s: %q", dmName, out)
	}
	return f[6]
}

// TestGetThinDelta mirrors a volume's move: a golden base written in a few
// places, sealed (read-only, inactive); a volume that is a writable
// snapshot of it, then written over base data and beyond, and discarded
// where the base has data. The delta against the base is exactly what the
// volume wrote (whole blocks) to copy and the discard to zero; without a
// base, every block the volume maps. The pool's metadata snapshot is
// released after each call.
func TestGetThinDelta(t *testing.T) {
	ctx := testContext(t)
	const class, vg, pool = "delta", "vg-delta", "thin-pool"
	tpool := "vg--delta-thin--pool-tpool"
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "dbase", DeviceClass: class, SizeBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"dvol", "dbase"} {
			_, _ = lvs.RemoveLV(testContext(t), &pb.RemoveLVRequest{Name: n, DeviceClass: class})
		}
	})
	for _, b := range []uint64{0, 5, 20} {
		ddBlocks(t, "/dev/vg-delta/dbase", b, 2)
	}
	if _, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "dvol", DeviceClass: class, SourceName: "dbase"}); err != nil {
		t.Fatal(err)
	}
	if _, err := lvs.ChangeLV(ctx, &pb.ChangeLVRequest{Name: "dbase", DeviceClass: class, ReadOnly: new(true), Active: new(false)}); err != nil {
		t.Fatal(err)
	}
	ddBlocks(t, "/dev/vg-delta/dvol", 5, 1)  // over base data
	ddBlocks(t, "/dev/vg-delta/dvol", 50, 3) // beyond it
	// 4 KiB inside block 100: the whole block is the volume's.
	if _, err := testVM.Run(ctx, "dd", "if=/dev/urandom", "of=/dev/vg-delta/dvol", "bs=4k", "seek=1601", "count=1",
		"oflag=direct", "conv=fsync", "status=none"); err != nil {
		t.Fatal(err)
	}
	if _, err := testVM.Run(ctx, "blkdiscard", "--offset", "0", "--length", fmt.Sprint(2*deltaBlock), "/dev/vg-delta/dvol"); err != nil {
		t.Fatal(err)
	}
	if attr := lvsOf(t, ctx, vg)["dbase"].attr; attr[4] == 'a' || attr[1] != 'r' {
		t.Fatalf("base attr %q, want read-only and inactive", attr)
	}

	r := func(b, n uint64, zero bool) *pb.ThinRange {
		return &pb.ThinRange{OffsetBytes: b * deltaBlock, LengthBytes: n * deltaBlock, Zero: zero}
	}
	tests := []struct {
		name string
		base string
		want []*pb.ThinRange
	}{
		{"against the sealed base", "dbase", []*pb.ThinRange{r(0, 2, true), r(5, 1, false), r(50, 3, false), r(100, 1, false)}},
		// Block 6 and 20-21 are the base's, shared: mapped all the same.
		{"no base", "", []*pb.ThinRange{r(5, 2, false), r(20, 2, false), r(50, 3, false), r(100, 1, false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			want := &pb.GetThinDeltaResponse{BlockSizeBytes: deltaBlock, SizeBytes: 64 * mib, Ranges: tt.want}
			var took []time.Duration
			for range 2 { // the second call proves the first released the snapshot
				start := time.Now()
				got, err := lvs.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "dvol", DeviceClass: class, BaseName: tt.base})
				took = append(took, time.Since(start))
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
					t.Errorf("GetThinDelta (-want +got):\n%s", d)
				}
				if h := heldMetadataSnap(t, tpool); h != "-" {
					t.Errorf("metadata snapshot held (root %s) after GetThinDelta", h)
				}
			}
			t.Logf("GetThinDelta base %q took %v", tt.base, took)
		})
	}

	// The pool is live while a thin LV of it is active, though lvm shows
	// the pool itself inactive; with none active lvmd refuses.
	if _, err := lvs.ChangeLV(ctx, &pb.ChangeLVRequest{Name: "dvol", DeviceClass: class, Active: new(false)}); err != nil {
		t.Fatal(err)
	}
	if attr := lvsOf(t, ctx, vg)[pool].attr; attr[4] == 'a' {
		t.Logf("pool attr %q: active by itself", attr)
	} else if _, err := lvs.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "dvol", DeviceClass: class}); err == nil {
		t.Errorf("GetThinDelta with pool %s inactive succeeded", attr)
	}
}

// TestChangeLVTagsRealLVM adds and removes tags in one lvchange, on real
// lvm2.
func TestChangeLVTagsRealLVM(t *testing.T) {
	ctx := testContext(t)
	const class = "delta"
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "dtags", DeviceClass: class, SizeBytes: 4 * mib, Tags: []string{"lv:old", "keep"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = lvs.RemoveLV(testContext(t), &pb.RemoveLVRequest{Name: "dtags", DeviceClass: class}) })
	resp, err := lvs.ChangeLV(ctx, &pb.ChangeLVRequest{Name: "dtags", DeviceClass: class, AddTags: []string{"move:node-2", "keep"}, DelTags: []string{"lv:old", "absent"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "keep,move:node-2,thinlvm" // lvs sorts them
	if got := lvsOf(t, ctx, "vg-delta")["dtags"].tags; got != want {
		t.Errorf("lvs tags %q, want %q", got, want)
	}
	// In no particular order: a view lvmd amended keeps the order of the
	// changes, a refreshed one has lvm's.
	if got := slices.Sorted(slices.Values(resp.GetVolume().GetTags())); strings.Join(got, ",") != want {
		t.Errorf("response tags %q, want %q", got, want)
	}
	// Back again.
	if _, err := lvs.ChangeLV(ctx, &pb.ChangeLVRequest{Name: "dtags", DeviceClass: class, AddTags: []string{"lv:old"}, DelTags: []string{"move:node-2"}}); err != nil {
		t.Fatal(err)
	}
	if got := lvsOf(t, ctx, "vg-delta")["dtags"].tags; got != "keep,lv:old,thinlvm" {
		t.Errorf("lvs tags %q after the round trip", got)
	}
}
