package fake_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
)

// Thin LVs get thin ids from 1 up, as lvm numbers them, and pools their
// chunk size (64 KiB unless set).
func TestThinIDsAndChunkSize(t *testing.T) {
	f := newRunner()
	f.Pools[1].ChunkSize = 1 << 20
	c := &lvm.Client{Runner: f}
	if err := c.CreateThin(t.Context(), lvm.ThinSpec{VG: "vg0", Pool: "pool", Name: "a", Size: gib}); err != nil {
		t.Fatal(err)
	}
	r := report(t, c, "vg0", "vg1")
	got := map[string][2]uint64{}
	for _, lv := range r.LVs {
		got[lv.Name] = [2]uint64{uint64(lv.ThinID), lv.ChunkSize}
	}
	want := map[string][2]uint64{"thin1": {1, 0}, "snap1": {2, 0}, "a": {3, 0}, "pool": {0, 64 << 10}, "tp": {0, 1 << 20}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("thin ids and chunk sizes (-want +got):\n%s", d)
	}
}

func TestChangeTags(t *testing.T) {
	f := newRunner()
	c := &lvm.Client{Runner: f}
	if err := c.ChangeTags(t.Context(), "vg0", "thin1", []string{"x", "thinlvm"}, []string{"a=b", "absent"}); err != nil {
		t.Fatal(err)
	}
	if lv, _ := f.GetLV("vg0", "thin1"); !cmp.Equal(lv.Tags, []string{"thinlvm", "x"}) {
		t.Errorf("tags %q, want [thinlvm x]", lv.Tags)
	}
	if _, err := f.Run(t.Context(), "lvchange", "--addtag", "y", "--permission", "r", "vg0/thin1"); err == nil {
		t.Error("tags with a permission change accepted: lvmd never sends them together")
	}
}

// The metadata snapshot is one per pool, on a live pool; thin_delta reads
// only with one held, and compares the LVs' backing files block by block.
func TestThinDelta(t *testing.T) {
	const bs = 64 << 10
	dir := t.TempDir()
	f := &fake.Runner{
		VGs:    []fake.VG{{Name: "vg-a", Size: 20 * gib, Free: 10 * gib}},
		Pools:  []fake.Pool{{VG: "vg-a", Name: "my-pool", Size: 8 * gib}},
		DevDir: dir,
	}
	c := &lvm.Client{Runner: f}
	ctx := t.Context()
	if err := c.CreateThin(ctx, lvm.ThinSpec{VG: "vg-a", Pool: "my-pool", Name: "base", Size: 4 * mib}); err != nil {
		t.Fatal(err)
	}
	write := func(name string, block int64, fill byte, blocks int) {
		t.Helper()
		fh, err := os.OpenFile(filepath.Join(dir, "vg-a", name), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		buf := make([]byte, blocks*bs)
		for i := range buf {
			buf[i] = fill
		}
		if _, err := fh.WriteAt(buf, block*bs); err != nil {
			t.Fatal(err)
		}
	}
	write("base", 0, 1, 2)
	write("base", 5, 1, 2)
	if err := c.CreateThinSnapshot(ctx, lvm.SnapshotSpec{VG: "vg-a", Source: "base", Name: "vol", Activate: true}); err != nil {
		t.Fatal(err)
	}
	write("vol", 0, 0, 2) // a discard: zeros where base has data
	write("vol", 5, 2, 1)
	write("vol", 50, 3, 3)

	if _, err := c.ThinDelta(ctx, "vg-a", "my-pool", 1, 2); err == nil {
		t.Fatal("thin_delta without a metadata snapshot succeeded")
	}
	if err := c.ReserveMetadataSnap(ctx, "vg-a", "my-pool"); err != nil {
		t.Fatal(err)
	}
	if err := c.ReserveMetadataSnap(ctx, "vg-a", "my-pool"); !errors.Is(err, lvm.ErrMetadataSnapHeld) {
		t.Errorf("second reserve: %v, want ErrMetadataSnapHeld", err)
	}
	same, diff, left, right := lvm.DeltaSame, lvm.DeltaDifferent, lvm.DeltaLeftOnly, lvm.DeltaRightOnly
	for _, tt := range []struct {
		base, id uint32
		want     []lvm.DeltaRange
	}{
		{1, 2, []lvm.DeltaRange{dr(left, 0, 2), dr(diff, 5, 1), dr(same, 6, 1), dr(right, 50, 3)}},
		{2, 2, []lvm.DeltaRange{dr(same, 5, 2), dr(same, 50, 3)}},
	} {
		d, err := c.ThinDelta(ctx, "vg-a", "my-pool", tt.base, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		want := &lvm.ThinDelta{BlockSectors: bs / 512, Left: tt.base, Right: tt.id, Ranges: tt.want}
		if d := cmp.Diff(want, d); d != "" {
			t.Errorf("thin_delta %d %d (-want +got):\n%s", tt.base, tt.id, d)
		}
	}
	if _, err := c.ThinDelta(ctx, "vg-a", "my-pool", 1, 9); !errors.Is(err, lvm.ErrNotFound) {
		t.Errorf("thin_delta of a missing thin id: %v, want ErrNotFound", err)
	}
	if err := c.ReleaseMetadataSnap(ctx, "vg-a", "my-pool"); err != nil || f.MetadataSnapHeld("vg-a", "my-pool") {
		t.Errorf("release: %v, held %t", err, f.MetadataSnapHeld("vg-a", "my-pool"))
	}
	if err := c.ReleaseMetadataSnap(ctx, "vg-a", "my-pool"); err == nil {
		t.Error("release of no metadata snapshot succeeded")
	}
	// Pool and LVs inactive: no -tpool device.
	for _, name := range []string{"base", "vol"} {
		if err := c.SetActive(ctx, "vg-a", name, false); err != nil {
			t.Fatal(err)
		}
	}
	f.Pools[0].Inactive = true
	if err := c.ReserveMetadataSnap(ctx, "vg-a", "my-pool"); !errors.Is(err, lvm.ErrNotActive) {
		t.Errorf("reserve on an inactive pool: %v, want ErrNotActive", err)
	}
}

func dr(kind lvm.DeltaKind, begin, length uint64) lvm.DeltaRange {
	return lvm.DeltaRange{Kind: kind, Begin: begin, Length: length}
}
