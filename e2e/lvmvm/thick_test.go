package lvmvm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// thickMatchesLVM waits until lvmd's capacity of the thick class is what
// vgs and lvs say: the VG's free space less the 1 GiB spare, and the
// class's LVs.
func thickMatchesLVM(t *testing.T, lvCount uint32, allocated uint64) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		free := factsOf(t, "vg0", "pool0").vgFree
		c := capacityOf(t, "thick")
		if c.GetType() != "thick" || c.GetVgFreeBytes() != free || c.GetAvailableBytes() != free-gib || c.GetLvCount() != lvCount || c.GetVirtualBytes() != allocated {
			return fmt.Sprintf("lvmd says %v; vgs says %d free, want %d LVs of %d bytes", c, free, lvCount, allocated)
		}
		return ""
	})
}

// TestThickClass runs a thick device class on real lvm2: linear LVs from
// vg0's free extents beside the ssd class's thin pool, capacity as vgs
// has it, growth, refusals, a copy's transient copy-on-write snapshot,
// and removal.
func TestThickClass(t *testing.T) {
	ctx := testContext(t)
	thickMatchesLVM(t, 0, 0)

	created, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "thick-a", DeviceClass: "thick", SizeBytes: 62 * mib, Tags: []string{"lv:thick-a"}})
	if err != nil {
		t.Fatal(err)
	}
	v := created.GetVolume()
	if !v.GetThick() || v.GetSizeBytes() != 64*mib || v.GetDevicePath() != "/dev/vg0/thick-a" {
		t.Fatalf("created %v: want a thick 64 MiB LV (rounded to the extent)", v)
	}
	got := lvsOf(t, ctx, "vg0")["thick-a"]
	if got.size != 64*mib || !strings.HasPrefix(got.attr, "-wi-a") || got.tags != "lv:thick-a,thinlvm" {
		t.Fatalf("lvs says %+v: want a linear, active LV", got)
	}
	thickMatchesLVM(t, 1, 64*mib)

	// Grown online: the data stays, the kernel sees the new size.
	writeRandom(t, ctx, "/dev/vg0/thick-a", 32)
	before := checksum(t, ctx, "/dev/vg0/thick-a", 32)
	if _, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "thick-a", DeviceClass: "thick", SizeBytes: 128 * mib}); err != nil {
		t.Fatal(err)
	}
	out, err := testVM.Run(ctx, "blockdev", "--getsize64", "/dev/vg0/thick-a")
	if err != nil || strings.TrimSpace(out) != strconv.FormatUint(128*mib, 10) {
		t.Fatalf("kernel size after resize: %q %v", out, err)
	}
	if after := checksum(t, ctx, "/dev/vg0/thick-a", 32); after != before {
		t.Error("growing changed the data")
	}
	thickMatchesLVM(t, 1, 128*mib)
	_, err = lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "thick-a", DeviceClass: "thick", SizeBytes: 64 * mib})
	wantCode(t, err, codes.OutOfRange)

	// More than the VG's free space less the spare: nothing made.
	avail := capacityOf(t, "thick").GetAvailableBytes()
	_, err = lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "thick-big", DeviceClass: "thick", SizeBytes: avail + 4*mib})
	wantCode(t, err, codes.ResourceExhausted)

	// Snapshots are refused.
	_, err = lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "thick-snap", DeviceClass: "thick", SourceName: "thick-a", ReadOnly: true})
	wantCode(t, err, codes.FailedPrecondition)
	if r := pb.ReasonOf(err); r != pb.ErrorReason_ERROR_REASON_THICK {
		t.Errorf("reason %v, want ERROR_REASON_THICK", r)
	}
	for _, name := range []string{"thick-big", "thick-snap"} {
		if _, ok := lvsOf(t, ctx, "vg0")[name]; ok {
			t.Errorf("refused request left lv %s behind", name)
		}
	}

	// A copy's point in time: lvm's copy-on-write snapshot, read-only, its
	// store the origin's size and its metadata; it keeps the old data while
	// the origin is written.
	tr, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "thick-a-transfer", DeviceClass: "thick", SourceName: "thick-a",
		ReadOnly: true, Transient: true, Tags: []string{"transfer:thick-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if tv := tr.GetVolume(); !tv.GetReadOnly() || tv.GetOrigin() != "thick-a" || tv.GetSizeBytes() != 128*mib {
		t.Errorf("transient snapshot %v: want read-only, of thick-a, its 128 MiB", tv)
	}
	// The store: the source's size and its metadata (lvm trims what it
	// cannot use).
	snap := lvsOf(t, ctx, "vg0")["thick-a-transfer"]
	if !strings.HasPrefix(snap.attr, "sri-a") || snap.origin != "thick-a" || snap.size <= 128*mib || snap.size > 136*mib {
		t.Errorf("lvs says %+v: want an active read-only snapshot of thick-a with a store of 128 MiB and its metadata", snap)
	}
	writeRandom(t, ctx, "/dev/vg0/thick-a", 32)
	if got := checksum(t, ctx, "/dev/vg0/thick-a-transfer", 32); got != before {
		t.Error("the snapshot does not keep the origin's data as it was")
	}
	d, err := lvs.GetThinDelta(ctx, &pb.GetThinDeltaRequest{Name: "thick-a-transfer", DeviceClass: "thick"})
	if err != nil {
		t.Fatal(err)
	}
	if rs := d.GetRanges(); d.GetSizeBytes() != 128*mib || len(rs) != 1 || rs[0].GetLengthBytes() != 128*mib {
		t.Errorf("delta %v: want the whole 128 MiB", d)
	}
	thickMatchesLVM(t, 2, 128*mib+snap.size)
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "thick-a-transfer", DeviceClass: "thick"}); err != nil {
		t.Fatal(err)
	}
	if a := lvsOf(t, ctx, "vg0")["thick-a"]; !strings.HasPrefix(a.attr, "-wi-a") {
		t.Errorf("origin after its snapshot went: %+v", a)
	}

	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "thick-a", DeviceClass: "thick"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lvsOf(t, ctx, "vg0")["thick-a"]; ok {
		t.Fatal("thick-a still exists after RemoveLV")
	}
	thickMatchesLVM(t, 0, 0)
}

// TestAdoptLV takes over LVs lvmd did not make, as another driver's (made
// here with bare lvm commands): a thin LV of ssd's pool and a linear LV of
// vg0 into the thick class, in place, data untouched; refusals leave the
// LVs as they were.
func TestAdoptLV(t *testing.T) {
	ctx := testContext(t)
	for _, argv := range [][]string{
		{"lvm", "lvcreate", "--yes", "--thin", "vg0/pool0", "--virtualsize", "32m", "--name", "foreign-thin"},
		{"lvm", "lvcreate", "--yes", "--size", "32m", "--name", "foreign-thick", "vg0"},
	} {
		if _, err := testVM.Run(ctx, argv...); err != nil {
			t.Fatal(err)
		}
	}
	sums := map[string]string{}
	for _, name := range []string{"foreign-thin", "foreign-thick"} {
		writeRandom(t, ctx, "/dev/vg0/"+name, 8)
		sums[name] = checksum(t, ctx, "/dev/vg0/"+name, 32)
	}
	// Each into the other's class: refused, nothing tagged.
	_, err := lvs.AdoptLV(ctx, &pb.AdoptLVRequest{Name: "foreign-thin", DeviceClass: "thick", Tags: []string{"lv:foreign-thin"}})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = lvs.AdoptLV(ctx, &pb.AdoptLVRequest{Name: "foreign-thick", DeviceClass: "ssd", Tags: []string{"lv:foreign-thick"}})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = lvs.AdoptLV(ctx, &pb.AdoptLVRequest{Name: "foreign-none", DeviceClass: "ssd"})
	wantCode(t, err, codes.NotFound)
	for _, name := range []string{"foreign-thin", "foreign-thick"} {
		if tags := lvsOf(t, ctx, "vg0")[name].tags; tags != "" {
			t.Errorf("a refused adoption tagged %s: %q", name, tags)
		}
	}

	for name, class := range map[string]string{"foreign-thin": "ssd", "foreign-thick": "thick"} {
		got, err := lvs.AdoptLV(ctx, &pb.AdoptLVRequest{Name: name, DeviceClass: class, Tags: []string{"lv:" + name}})
		if err != nil {
			t.Fatal(err)
		}
		if v := got.GetVolume(); v.GetSizeBytes() != 32*mib || v.GetThick() != (class == "thick") {
			t.Errorf("adopted %v", v)
		}
		if l := lvsOf(t, ctx, "vg0")[name]; l.tags != "lv:"+name+",thinlvm" || l.size != 32*mib {
			t.Errorf("lvs says %+v after the adoption", l)
		}
		if got := checksum(t, ctx, "/dev/vg0/"+name, 32); got != sums[name] {
			t.Errorf("the adoption changed %s's data", name)
		}
		// lvmd's from now on: it grows it and removes it.
		if _, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: name, DeviceClass: class, SizeBytes: 64 * mib}); err != nil {
			t.Errorf("resize the adopted %s: %v", name, err)
		}
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: class}); err != nil {
			t.Fatal(err)
		}
		if _, ok := lvsOf(t, ctx, "vg0")[name]; ok {
			t.Errorf("%s still exists after RemoveLV", name)
		}
	}
}
