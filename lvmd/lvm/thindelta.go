package lvm

import (
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
)

// DeltaKind is how thin_delta classes a run of blocks of two thin devices,
// the left (--snap1) and the right (--snap2).
type DeltaKind string

// The kinds of thin_delta's ranges (its element names).
const (
	// DeltaSame: both map the blocks to the same data blocks.
	DeltaSame DeltaKind = "same"
	// DeltaDifferent: both map the blocks, to different data blocks.
	DeltaDifferent DeltaKind = "different"
	// DeltaLeftOnly: only the left device maps the blocks.
	DeltaLeftOnly DeltaKind = "left_only"
	// DeltaRightOnly: only the right device maps the blocks.
	DeltaRightOnly DeltaKind = "right_only"
)

// DeltaRange is a run of Length blocks from block Begin.
type DeltaRange struct {
	Kind          DeltaKind
	Begin, Length uint64
}

// ThinDelta is what `thin_delta -m --snap1 L --snap2 R` says of two thin
// devices of a pool.
type ThinDelta struct {
	// BlockSectors is the pool's data block size in 512-byte sectors.
	BlockSectors uint64
	// Left and Right are the device ids compared.
	Left, Right uint32
	// Ranges are in block order and do not overlap. Blocks neither device
	// maps are in none.
	Ranges []DeltaRange
}

type wireDelta struct {
	XMLName       xml.Name `xml:"superblock"`
	DataBlockSize string   `xml:"data_block_size,attr"`
	Diffs         []struct {
		Left   string      `xml:"left,attr"`
		Right  string      `xml:"right,attr"`
		Ranges []wireRange `xml:",any"`
	} `xml:"diff"`
}

type wireRange struct {
	XMLName xml.Name
	Begin   *string `xml:"begin,attr"`
	Length  *string `xml:"length,attr"`
}

// ParseThinDelta parses thin_delta's output (thin-provisioning-tools
// 0.9.0, without --verbose): a superblock holding one diff of same,
// different, left_only and right_only elements with begin and length in
// blocks.
func ParseThinDelta(data []byte) (*ThinDelta, error) {
	var w wireDelta
	if err := xml.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("parse thin_delta output: %w", err)
	}
	bs, err := strconv.ParseUint(w.DataBlockSize, 10, 64)
	// A block is at most 1 GiB (2097152 sectors) in dm-thin.
	if err != nil || bs == 0 || bs > 1<<21 {
		return nil, fmt.Errorf("parse thin_delta output: data_block_size=%q is not a block size in sectors", w.DataBlockSize)
	}
	if len(w.Diffs) != 1 {
		return nil, fmt.Errorf("parse thin_delta output: %d diff elements, want 1", len(w.Diffs))
	}
	diff := w.Diffs[0]
	d := &ThinDelta{BlockSectors: bs}
	for _, f := range []struct {
		name, s string
		id      *uint32
	}{{"left", diff.Left, &d.Left}, {"right", diff.Right, &d.Right}} {
		id, err := strconv.ParseUint(f.s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("parse thin_delta output: diff %s=%q: %w", f.name, f.s, err)
		}
		*f.id = uint32(id)
	}
	var end uint64 // the end of the previous range
	for _, wr := range diff.Ranges {
		kind := DeltaKind(wr.XMLName.Local)
		switch kind {
		case DeltaSame, DeltaDifferent, DeltaLeftOnly, DeltaRightOnly:
		default:
			return nil, fmt.Errorf("parse thin_delta output: unknown element <%s>", wr.XMLName.Local)
		}
		if wr.Begin == nil || wr.Length == nil {
			return nil, fmt.Errorf("parse thin_delta output: <%s> without begin and length (--verbose output?)", kind)
		}
		r := DeltaRange{Kind: kind}
		if r.Begin, err = strconv.ParseUint(*wr.Begin, 10, 64); err != nil {
			return nil, fmt.Errorf("parse thin_delta output: <%s begin=%q>: %w", kind, *wr.Begin, err)
		}
		if r.Length, err = strconv.ParseUint(*wr.Length, 10, 64); err != nil || r.Length == 0 {
			return nil, fmt.Errorf("parse thin_delta output: <%s length=%q> is not a positive number", kind, *wr.Length)
		}
		// Block numbers times the block size must fit in bytes.
		if r.Begin > math.MaxUint64/(bs*512)-r.Length {
			return nil, fmt.Errorf("parse thin_delta output: <%s begin=%d length=%d> beyond any device", kind, r.Begin, r.Length)
		}
		if r.Begin < end {
			return nil, fmt.Errorf("parse thin_delta output: <%s begin=%d> overlaps or precedes the range before", kind, r.Begin)
		}
		end = r.Begin + r.Length
		d.Ranges = append(d.Ranges, r)
	}
	return d, nil
}

// BlockSize is the pool's block size in bytes.
func (d *ThinDelta) BlockSize() uint64 { return d.BlockSectors * 512 }

// ByteRange is a range of a thin LV in bytes.
type ByteRange struct {
	Offset, Length uint64
	// Zero: the range reads as zeros in the LV while the base maps it.
	Zero bool
}

// CopyRanges turns d into the ranges a reader copies to reproduce the
// right device, of size bytes. Of two devices (Left the base): different
// and right_only ranges are copied, left_only ones are Zero (the base maps
// them, the LV does not), same ones skipped. Of a device with itself
// (Left == Right) every range is "same" and is a mapped range, copied. The
// ranges are clipped to size, in order, and adjacent ones of one kind are
// merged.
func (d *ThinDelta) CopyRanges(size uint64) ([]ByteRange, error) {
	bs := d.BlockSize()
	var out []ByteRange
	for _, r := range d.Ranges {
		var zero bool
		switch {
		case d.Left == d.Right && r.Kind == DeltaSame:
		case d.Left == d.Right:
			return nil, fmt.Errorf("thin_delta of device %d with itself has a %s range at block %d", d.Left, r.Kind, r.Begin)
		case r.Kind == DeltaSame:
			continue
		case r.Kind == DeltaLeftOnly:
			zero = true
		}
		off, n := r.Begin*bs, r.Length*bs // ParseThinDelta checked they fit
		if off >= size {
			continue
		}
		n = min(n, size-off)
		if k := len(out) - 1; k >= 0 && out[k].Zero == zero && out[k].Offset+out[k].Length == off {
			out[k].Length += n
			continue
		}
		out = append(out, ByteRange{Offset: off, Length: n, Zero: zero})
	}
	return out, nil
}
