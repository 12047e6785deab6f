package lvm_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

const kib = 1 << 10

// The thin_delta-*.xml captures are thin_delta 0.9.0 in the VM on a pool of
// 64 KiB blocks: base (id 1) written at blocks 0-1, 5-6 and 20-21; vol (id
// 2) a snapshot of it, written at block 5 and 50-52, blocks 0-1 discarded;
// empty (id 3) never written.
func TestParseThinDeltaCaptured(t *testing.T) {
	same, diff, left, right := lvm.DeltaSame, lvm.DeltaDifferent, lvm.DeltaLeftOnly, lvm.DeltaRightOnly
	tests := []struct {
		file        string
		left, right uint32
		want        []lvm.DeltaRange
	}{
		{"thin_delta-base-vol.xml", 1, 2, []lvm.DeltaRange{dr(left, 0, 2), dr(diff, 5, 1), dr(same, 6, 1), dr(same, 20, 2), dr(right, 50, 3)}},
		{"thin_delta-vol-base.xml", 2, 1, []lvm.DeltaRange{dr(right, 0, 2), dr(diff, 5, 1), dr(same, 6, 1), dr(same, 20, 2), dr(left, 50, 3)}},
		// A device with itself: its mapped blocks, as "same" (as thin_dump
		// shows them: 5, 6, 20-21, 50-52).
		{"thin_delta-vol-vol.xml", 2, 2, []lvm.DeltaRange{dr(same, 5, 2), dr(same, 20, 2), dr(same, 50, 3)}},
		{"thin_delta-empty.xml", 3, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			d, err := lvm.ParseThinDelta(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			want := &lvm.ThinDelta{BlockSectors: 128, Left: tt.left, Right: tt.right, Ranges: tt.want}
			if diff := cmp.Diff(want, d); diff != "" {
				t.Errorf("ParseThinDelta (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseThinDeltaErrors(t *testing.T) {
	doc := func(bs, diff string) string {
		return `<superblock uuid="" time="1" transaction="3" data_block_size="` + bs + `" nr_data_blocks="0">` + diff + `</superblock>`
	}
	tests := []struct{ name, data, want string }{
		{"not xml", "no metadata snap", "parse thin_delta output"},
		{"no block size", doc("", `<diff left="1" right="2"></diff>`), "data_block_size"},
		{"zero block size", doc("0", `<diff left="1" right="2"></diff>`), "data_block_size"},
		{"no diff", doc("128", ""), "0 diff elements"},
		{"bad id", doc("128", `<diff left="x" right="2"></diff>`), "left"},
		{"unknown element", doc("128", `<diff left="1" right="2"><moved begin="1" length="1"/></diff>`), "unknown element"},
		{"verbose output", doc("128", `<diff left="1" right="2"><same><range begin="1" data_begin="3" length="1"/></same></diff>`), "without begin"},
		{"zero length", doc("128", `<diff left="1" right="2"><same begin="1" length="0"/></diff>`), "positive"},
		{"overflow", doc("128", `<diff left="1" right="2"><same begin="18446744073709551615" length="1"/></diff>`), "beyond"},
		{"out of order", doc("128", `<diff left="1" right="2"><same begin="5" length="2"/><different begin="6" length="1"/></diff>`), "overlaps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lvm.ParseThinDelta([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseThinDelta: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestCopyRanges(t *testing.T) {
	r := func(kind lvm.DeltaKind, begin, length uint64) lvm.DeltaRange {
		return lvm.DeltaRange{Kind: kind, Begin: begin, Length: length}
	}
	copyR := func(off, n uint64) lvm.ByteRange { return lvm.ByteRange{Offset: off * kib, Length: n * kib} }
	zeroR := func(off, n uint64) lvm.ByteRange {
		return lvm.ByteRange{Offset: off * kib, Length: n * kib, Zero: true}
	}
	tests := []struct {
		name        string
		left, right uint32
		ranges      []lvm.DeltaRange
		size        uint64
		want        []lvm.ByteRange
		wantErr     bool
	}{
		{
			name: "captured base and vol", left: 1, right: 2, size: 100 << 20,
			ranges: []lvm.DeltaRange{r("left_only", 0, 2), r("different", 5, 1), r("same", 6, 1), r("same", 20, 2), r("right_only", 50, 3)},
			want:   []lvm.ByteRange{zeroR(0, 128), copyR(320, 64), copyR(3200, 192)},
		},
		{
			name: "different and right_only next to each other merge", left: 1, right: 2, size: 1 << 30,
			ranges: []lvm.DeltaRange{r("different", 1, 1), r("right_only", 2, 2), r("left_only", 4, 1), r("left_only", 5, 1), r("different", 6, 1)},
			want:   []lvm.ByteRange{copyR(64, 192), zeroR(256, 128), copyR(384, 64)},
		},
		{
			name: "a same range between keeps them apart", left: 1, right: 2, size: 1 << 30,
			ranges: []lvm.DeltaRange{r("different", 1, 1), r("same", 2, 1), r("different", 3, 1)},
			want:   []lvm.ByteRange{copyR(64, 64), copyR(192, 64)},
		},
		{
			name: "clipped to the size", left: 1, right: 2, size: 100 * kib,
			ranges: []lvm.DeltaRange{r("different", 1, 1), r("right_only", 2, 1)},
			want:   []lvm.ByteRange{copyR(64, 36)},
		},
		{
			name: "no base: mapped ranges", left: 2, right: 2, size: 100 << 20,
			ranges: []lvm.DeltaRange{r("same", 5, 2), r("same", 20, 2), r("same", 50, 3)},
			want:   []lvm.ByteRange{copyR(320, 128), copyR(1280, 128), copyR(3200, 192)},
		},
		{name: "no base, nothing mapped", left: 3, right: 3, size: 8 << 20},
		{
			name: "no base with another kind", left: 2, right: 2, size: 1 << 30,
			ranges: []lvm.DeltaRange{r("different", 5, 1)}, wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &lvm.ThinDelta{BlockSectors: 128, Left: tt.left, Right: tt.right, Ranges: tt.ranges}
			got, err := d.CopyRanges(tt.size)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CopyRanges: %v, want error %t", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CopyRanges (-want +got):\n%s", diff)
			}
		})
	}
}

func dr(kind lvm.DeltaKind, begin, length uint64) lvm.DeltaRange {
	return lvm.DeltaRange{Kind: kind, Begin: begin, Length: length}
}
