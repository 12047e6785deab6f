package lvm_test

import (
	"testing"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// FuzzParseThinDelta checks that ParseThinDelta never panics and that what
// it accepts gives CopyRanges what it relies on: ranges in order, without
// overlap, whose bytes fit; and that CopyRanges then returns ranges in
// order, within size, non-empty, with no two adjacent of one kind, covering
// exactly the blocks it copies or zeroes.
func FuzzParseThinDelta(f *testing.F) {
	for _, name := range []string{"thin_delta-base-vol.xml", "thin_delta-vol-base.xml", "thin_delta-vol-vol.xml", "thin_delta-empty.xml"} {
		f.Add(readTestdata(f, name), uint64(100<<20))
	}
	f.Add([]byte(`<superblock data_block_size="2097152"><diff left="1" right="2"><different begin="0" length="3"/></diff></superblock>`), uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, size uint64) {
		d, err := lvm.ParseThinDelta(data)
		if err != nil {
			return
		}
		var end uint64
		for _, r := range d.Ranges {
			if r.Length == 0 || r.Begin < end {
				t.Fatalf("range %+v after block %d", r, end)
			}
			end = r.Begin + r.Length
		}
		got, err := d.CopyRanges(size)
		if err != nil {
			if d.Left != d.Right {
				t.Fatalf("CopyRanges of two devices: %v", err)
			}
			return
		}
		// The bytes of the blocks to copy (or zero), clipped, by kind.
		var wantCopy, wantZero uint64
		bs := d.BlockSize()
		for _, r := range d.Ranges {
			if r.Kind == lvm.DeltaSame && d.Left != d.Right || r.Begin*bs >= size {
				continue
			}
			n := min(r.Length*bs, size-r.Begin*bs)
			if r.Kind == lvm.DeltaLeftOnly {
				wantZero += n
			} else {
				wantCopy += n
			}
		}
		var gotCopy, gotZero, prevEnd uint64
		for i, r := range got {
			if r.Length == 0 || r.Offset < prevEnd || r.Offset+r.Length > size {
				t.Fatalf("range %d %+v: empty, out of order or beyond %d", i, r, size)
			}
			if i > 0 && got[i-1].Zero == r.Zero && prevEnd == r.Offset {
				t.Fatalf("ranges %d and %d of one kind not merged: %+v", i-1, i, got)
			}
			prevEnd = r.Offset + r.Length
			if r.Zero {
				gotZero += r.Length
			} else {
				gotCopy += r.Length
			}
		}
		if gotCopy != wantCopy || gotZero != wantZero {
			t.Fatalf("copy %d zero %d bytes, want %d and %d: %+v", gotCopy, gotZero, wantCopy, wantZero, got)
		}
	})
}
