package fake

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
)

// The device-mapper tools exit 1 when they fail.
const exitDMFailed = 1

// MetadataSnapHeld tells whether a pool holds a metadata snapshot
// (dmsetup message ... reserve_metadata_snap, not yet released).
func (r *Runner) MetadataSnapHeld(vg, pool string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[vg+"/"+pool]
}

// dmFail is a failed dmsetup or thin_delta.
func dmFail(c *command, format string, a ...any) error {
	return &lvm.CommandError{Args: c.args, ExitCode: exitDMFailed, Stderr: fmt.Sprintf(format, a...)}
}

// poolByDMName finds the pool whose layer device is name (lvm.DMName).
func (r *Runner) poolByDMName(name, layer string) *Pool {
	for i := range r.Pools {
		if p := &r.Pools[i]; lvm.DMName(p.VG, p.Name, layer) == name {
			return p
		}
	}
	return nil
}

// poolLive tells whether a pool's -tpool device exists: the pool is active,
// or one of its thin LVs is (which activates the pool's layers without the
// pool's own "a").
func (r *Runner) poolLive(p *Pool) bool {
	if !p.Inactive {
		return true
	}
	return slices.ContainsFunc(r.LVs, func(lv LV) bool { return lv.VG == p.VG && lv.Pool == p.Name && !lv.Inactive })
}

// dmsetup answers `dmsetup message <vg>-<pool>-tpool 0
// reserve_metadata_snap|release_metadata_snap` as the kernel does: a second
// reserve is EBUSY, a release of none EINVAL, a pool not live ENXIO.
func (r *Runner) dmsetup(c *command) (string, error) {
	a := c.args
	if len(a) != 5 || a[1] != "message" || a[3] != "0" {
		return "", c.unsupported("dmsetup command")
	}
	p := r.poolByDMName(a[2], "-tpool")
	if p == nil || !r.poolLive(p) {
		return "", dmFail(c, "device-mapper: message ioctl on %s  failed: No such device or address\nCommand failed.", a[2])
	}
	key := p.VG + "/" + p.Name
	if r.held == nil {
		r.held = map[string]bool{}
	}
	switch a[4] {
	case "reserve_metadata_snap":
		if r.held[key] {
			return "", dmFail(c, "device-mapper: message ioctl on %s  failed: Device or resource busy\nCommand failed.", a[2])
		}
		r.held[key] = true
	case "release_metadata_snap":
		if !r.held[key] {
			return "", dmFail(c, "device-mapper: message ioctl on %s  failed: Invalid argument\nCommand failed.", a[2])
		}
		delete(r.held, key)
	default:
		return "", c.unsupported("dmsetup message %q", a[4])
	}
	return "", nil
}

// thinDelta answers `thin_delta -m --snap1 A --snap2 B
// /dev/mapper/<vg>-<pool>_tmeta` from the pool's metadata snapshot. With
// DevDir set, a block is mapped when its bytes in the LV's backing file are
// not all zero, and two mapped blocks are the same when their bytes are;
// without, no LV maps anything.
func (r *Runner) thinDelta(c *command) (string, error) {
	a := c.args
	if len(a) != 7 || a[1] != "-m" || a[2] != "--snap1" || a[4] != "--snap2" || !strings.HasPrefix(a[6], "/dev/mapper/") {
		return "", c.unsupported("thin_delta command")
	}
	p := r.poolByDMName(strings.TrimPrefix(a[6], "/dev/mapper/"), "_tmeta")
	if p == nil || !r.poolLive(p) {
		return "", dmFail(c, "Couldn't stat dev path %s", a[6])
	}
	if !r.held[p.VG+"/"+p.Name] {
		return "", dmFail(c, "no current metadata snap")
	}
	var lvs [2]*LV
	for i, s := range []string{a[3], a[5]} {
		id, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return "", c.unsupported("thin id %q", s)
		}
		j := slices.IndexFunc(r.LVs, func(lv LV) bool { return lv.VG == p.VG && lv.Pool == p.Name && lv.ThinID == uint32(id) })
		if j < 0 {
			return "", dmFail(c, "Unable to find mapping tree for snap%d (%d)", i+1, id)
		}
		lvs[i] = &r.LVs[j]
	}
	bs := chunkSize(p)
	var maps [2]map[uint64][]byte
	for i, lv := range lvs {
		m, err := r.mappedBlocks(lv, bs)
		if err != nil {
			return "", dmFail(c, "read %s/%s: %v", lv.VG, lv.Name, err)
		}
		maps[i] = m
	}
	var blocks []uint64
	for _, m := range maps {
		for b := range m {
			if !slices.Contains(blocks, b) {
				blocks = append(blocks, b)
			}
		}
	}
	slices.Sort(blocks)
	var out strings.Builder
	fmt.Fprintf(&out, "<superblock uuid=\"\" time=\"1\" transaction=\"1\" data_block_size=\"%d\" nr_data_blocks=\"0\">\n", bs/512)
	fmt.Fprintf(&out, "  <diff left=\"%s\" right=\"%s\">\n", a[3], a[5])
	var kind string
	var begin, length uint64
	flush := func() {
		if length > 0 {
			fmt.Fprintf(&out, "    <%s begin=\"%d\" length=\"%d\"/>\n", kind, begin, length)
		}
	}
	for _, b := range blocks {
		l, inL := maps[0][b]
		rt, inR := maps[1][b]
		k := "same"
		switch {
		case inL && !inR:
			k = "left_only"
		case inR && !inL:
			k = "right_only"
		case !bytes.Equal(l, rt):
			k = "different"
		}
		if k == kind && b == begin+length {
			length++
			continue
		}
		flush()
		kind, begin, length = k, b, 1
	}
	flush()
	out.WriteString("  </diff>\n</superblock>\n")
	return out.String(), nil
}

// mappedBlocks reads the blocks of lv's backing file that are not all
// zero, skipping holes; none without DevDir.
func (r *Runner) mappedBlocks(lv *LV, bs uint64) (map[uint64][]byte, error) {
	m := map[uint64][]byte{}
	if r.DevDir == "" {
		return m, nil
	}
	f, err := os.Open(r.devicePath(lv.VG, lv.Name))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for off := int64(0); uint64(off) < lv.Size; {
		data, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		if err != nil {
			return nil, err
		}
		b := uint64(data) / bs
		buf := make([]byte, bs)
		n, err := f.ReadAt(buf, int64(b*bs))
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if buf = buf[:n]; slices.ContainsFunc(buf, func(x byte) bool { return x != 0 }) {
			m[b] = buf
		}
		off = int64((b + 1) * bs)
	}
	return m, nil
}
