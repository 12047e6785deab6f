package lvmvm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// guestLV is what `lvs` in the guest says of one LV.
type guestLV struct {
	size   uint64
	attr   string
	origin string
	tags   string
}

func lvsOf(t *testing.T, ctx context.Context, vg string) map[string]guestLV {
	t.Helper()
	rows, err := testVM.LVS(ctx, vg, "lv_size,lv_attr,origin,lv_tags")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]guestLV{}
	for name, f := range rows {
		size, err := strconv.ParseUint(strings.TrimSpace(f[0]), 10, 64)
		if err != nil {
			t.Fatalf("lvs size of %s: %v", name, err)
		}
		out[name] = guestLV{size: size, attr: f[1], origin: f[2], tags: f[3]}
	}
	return out
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
}

// checksum returns the sha256 of the first n MiB of a guest device.
func checksum(t *testing.T, ctx context.Context, dev string, n int) string {
	t.Helper()
	out, err := testVM.Run(ctx, "bash", "-c", fmt.Sprintf("dd if=%s bs=1M count=%d status=none | sha256sum", dev, n))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)[0]
}

func writeRandom(t *testing.T, ctx context.Context, dev string, n int) {
	t.Helper()
	if _, err := testVM.Run(ctx, "dd", "if=/dev/urandom", "of="+dev, "bs=1M", fmt.Sprintf("count=%d", n), "oflag=direct", "status=none"); err != nil {
		t.Fatal(err)
	}
}

func TestCreateResizeRemove(t *testing.T) {
	ctx := testContext(t)
	created, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "crr", SizeBytes: 100*mib + 1, Tags: []string{"lv:crr-owner"}})
	if err != nil {
		t.Fatal(err)
	}
	v := created.GetVolume()
	// Sizes are rounded up to the 4 MiB extent, as lvm does.
	if v.GetSizeBytes() != 104*mib || v.GetDevicePath() != "/dev/vg0/crr" || v.GetDeviceClass() != "ssd" {
		t.Fatalf("created %v", v)
	}
	got := lvsOf(t, ctx, "vg0")["crr"]
	if got.size != 104*mib || !strings.HasPrefix(got.attr, "Vwi-a") || got.tags != "lv:crr-owner,thinlvm" {
		t.Fatalf("lvs says %+v", got)
	}
	if _, err := testVM.Run(ctx, "blockdev", "--getsize64", "/dev/vg0/crr"); err != nil {
		t.Fatalf("device node: %v", err)
	}

	resized, err := lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "crr", SizeBytes: 300 * mib})
	if err != nil {
		t.Fatal(err)
	}
	if resized.GetVolume().GetSizeBytes() != 300*mib {
		t.Fatalf("resized %v", resized.GetVolume())
	}
	out, err := testVM.Run(ctx, "blockdev", "--getsize64", "/dev/vg0/crr")
	if err != nil || strings.TrimSpace(out) != strconv.FormatUint(300*mib, 10) {
		t.Fatalf("kernel size after resize: %q %v", out, err)
	}
	_, err = lvs.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "crr", SizeBytes: 200 * mib})
	wantCode(t, err, codes.OutOfRange)

	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "crr"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lvsOf(t, ctx, "vg0")["crr"]; ok {
		t.Fatal("lv crr still exists after RemoveLV")
	}
	_, err = lvs.GetLV(ctx, &pb.GetLVRequest{Name: "crr"})
	wantCode(t, err, codes.NotFound)
}

func TestSnapshotCopyOnWrite(t *testing.T) {
	ctx := testContext(t)
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "cow-origin", SizeBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, ctx, "/dev/vg0/cow-origin", 16)
	before := checksum(t, ctx, "/dev/vg0/cow-origin", 16)

	snap, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "cow-snap", SourceName: "cow-origin", Tags: []string{"lv:cow-snap"}})
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetVolume().GetOrigin() != "cow-origin" || snap.GetVolume().GetSizeBytes() != 64*mib || !snap.GetVolume().GetActive() {
		t.Fatalf("snapshot %v", snap.GetVolume())
	}
	big, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "cow-big", SourceName: "cow-origin", SizeBytes: 256 * mib})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "cow-ro", SourceName: "cow-origin", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !ro.GetVolume().GetReadOnly() {
		t.Fatalf("read-only snapshot %v", ro.GetVolume())
	}

	writeRandom(t, ctx, "/dev/vg0/cow-origin", 16) // overwrite the origin
	if after := checksum(t, ctx, "/dev/vg0/cow-origin", 16); after == before {
		t.Fatal("origin unchanged after overwrite")
	}
	for _, name := range []string{"cow-snap", "cow-big", "cow-ro"} {
		if got := checksum(t, ctx, "/dev/vg0/"+name, 16); got != before {
			t.Errorf("snapshot %s reads %s, want the origin's old data %s", name, got, before)
		}
	}
	// Writes to a snapshot stay in the snapshot.
	writeRandom(t, ctx, "/dev/vg0/cow-snap", 4)
	if got := checksum(t, ctx, "/dev/vg0/cow-big", 16); got != before {
		t.Error("a write to one snapshot changed another")
	}
	// The read-only snapshot refuses writes.
	if res, err := testVM.Exec(ctx, "dd", "if=/dev/zero", "of=/dev/vg0/cow-ro", "bs=1M", "count=1", "oflag=direct", "status=none"); err != nil || res.ExitCode == 0 {
		t.Errorf("write to the read-only snapshot: exit %v, err %v", res, err)
	}

	g := lvsOf(t, ctx, "vg0")
	if g["cow-big"].size != 256*mib || g["cow-big"].origin != "cow-origin" || big.GetVolume().GetSizeBytes() != 256*mib {
		t.Errorf("larger snapshot: lvs %+v, lvmd %v", g["cow-big"], big.GetVolume())
	}
	if g["cow-ro"].attr[1] != 'r' {
		t.Errorf("read-only snapshot attr %q", g["cow-ro"].attr)
	}
	out, err := testVM.Run(ctx, "blockdev", "--getsize64", "/dev/vg0/cow-big")
	if err != nil || strings.TrimSpace(out) != strconv.FormatUint(256*mib, 10) {
		t.Errorf("larger snapshot device size %q %v", out, err)
	}

	_, err = lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "cow-small", SourceName: "cow-origin", SizeBytes: 32 * mib})
	wantCode(t, err, codes.OutOfRange)
	_, err = lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "cow-none", SourceName: "no-such-origin"})
	wantCode(t, err, codes.NotFound)

	// Thin snapshots outlive their origin.
	if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "cow-origin"}); err != nil {
		t.Fatal(err)
	}
	if got := checksum(t, ctx, "/dev/vg0/cow-ro", 16); got != before {
		t.Error("snapshot data changed after its origin was removed")
	}
	for _, name := range []string{"cow-snap", "cow-big", "cow-ro"} {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
}
