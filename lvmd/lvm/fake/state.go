package fake

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// DefaultExtentSize is the extent size of a VG whose ExtentSize is 0:
// lvm2's default, 4 MiB.
const DefaultExtentSize = 4 << 20

// VG is a simulated volume group. Free is what is left after the thin
// pools; thin LVs take nothing from it.
type VG struct {
	Name       string
	UUID       string
	Size, Free uint64
	// ExtentSize is 0 for DefaultExtentSize.
	ExtentSize uint64
	// MetadataAreaSize is the VG's metadata area (vg_mda_size); 0 for
	// lvm2's default, DefaultMetadataAreaSize. The fake keeps the VG's
	// metadata size as lvm2 would write it (MetadataBytes) and fails a
	// change that would not fit, as lvm2 does, changing nothing.
	MetadataAreaSize uint64
	// seqno is the metadata's sequence number, as lvm's error names it.
	seqno int
}

// DefaultMetadataAreaSize is lvm2's default metadata area, what pvcreate
// makes without --metadatasize: 1020 KiB, up to the first extent at 1 MiB.
const DefaultMetadataAreaSize = 1044480

// The fake's model of a VG's text metadata, from lvm2 2.03.16 in the test
// VM: an empty VG's is under 768 bytes, a thin pool (with its hidden data,
// metadata and spare LVs) adds about 1.5 KiB, a thin LV about 300 bytes
// plus its name and tags, a snapshot about 15 more and its origin's name.
const (
	metadataVGBytes   = 700
	metadataPoolBytes = 1536
	metadataLVBytes   = 300
)

// lvMetadataBytes is lv's section; a snapshot's has an origin line.
func lvMetadataBytes(lv *LV) uint64 {
	n := uint64(metadataLVBytes + len(lv.Name))
	if lv.Origin != "" {
		n += uint64(15 + len(lv.Origin))
	}
	for _, t := range lv.Tags {
		n += uint64(len(t)) + 4
	}
	return n
}

func metadataAreaSize(vg *VG) uint64 {
	if vg.MetadataAreaSize == 0 {
		return DefaultMetadataAreaSize
	}
	return vg.MetadataAreaSize
}

// metadataMax is the largest copy of the metadata an area takes: lvm2
// writes the new copy beside the old in a circular buffer after a
// 512-byte header, and aligns it to a sector.
func metadataMax(vg *VG) uint64 { return (metadataAreaSize(vg)-512)/2 - 512 }

// metadataBytes is the size of vg's metadata, plus extra.
func (r *Runner) metadataBytes(vg *VG) uint64 {
	n := uint64(metadataVGBytes)
	for _, p := range r.Pools {
		if p.VG == vg.Name {
			n += metadataPoolBytes
		}
	}
	for _, lv := range r.LVs {
		if lv.VG == vg.Name {
			n += lvMetadataBytes(&lv)
		}
	}
	return n
}

// metadataFree is vg_mda_free: the room left in whole sectors.
func (r *Runner) metadataFree(vg *VG) uint64 {
	used, limit := r.metadataBytes(vg), metadataMax(vg)
	if used >= limit {
		return 0
	}
	return (limit - used) / 512 * 512
}

// writeMetadata is lvm2's vg_write of a change that adds grow bytes to
// vg's metadata: lvm's error when the new metadata does not fit.
func (r *Runner) writeMetadata(c *command, vg *VG, grow uint64) error {
	vg.seqno++
	if size := r.metadataBytes(vg) + grow; size > metadataMax(vg) {
		return c.fail("VG %s %d metadata on /dev/fake-%s (%d bytes) exceeds maximum metadata size (%d bytes)\n  Failed to write VG %s.",
			vg.Name, vg.seqno, vg.Name, size, metadataMax(vg), vg.Name)
	}
	return nil
}

// Pool is a simulated thin pool. The test sets its use; growing the pool
// scales the use down, as the same data then fills a larger pool.
type Pool struct {
	VG, Name                     string
	UUID                         string
	Size                         uint64
	DataPercent, MetadataPercent float64
	// WhenFull is lv_when_full: "" reports lvm2's default, "queue";
	// lvchange --errorwhenfull sets "error" or "queue".
	WhenFull string
	// ReadOnly is a pool the kernel made read-only (metadata full); a pool
	// at 100% data is reported out of data space.
	ReadOnly bool
	// Inactive is a pool an administrator deactivated (lvchange -an, e.g.
	// to repair it): no "a" in its attributes and no data or metadata use.
	Inactive bool
	// ChunkSize is the pool's block size; 0 reports lvm2's default, 64 KiB.
	ChunkSize uint64
}

// LV is a simulated thin LV or thin snapshot (Origin set).
type LV struct {
	VG, Name, Pool string
	UUID           string
	Origin         string
	Size           uint64
	Tags           []string
	ReadOnly       bool
	// Inactive LVs report no data use and no "a" in their attributes.
	Inactive bool
	// SkipActivation is lvm's activation skip flag, set on thin snapshots
	// unless created with --setactivationskip n.
	SkipActivation bool
	// DataPercent is the LV's share of its own size that is written.
	DataPercent float64
	// ThinID is the LV's thin device id; 0 gets the next free one in the
	// VG at the next command.
	ThinID uint32
}

// MetadataFree is the named VG's vg_mda_free now; 0 for a VG it lacks.
func (r *Runner) MetadataFree(vg string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.vg(vg); v != nil {
		return r.metadataFree(v)
	}
	return 0
}

// GetVG returns a copy of the VG named name.
func (r *Runner) GetVG(name string) (VG, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if vg := r.vg(name); vg != nil {
		return *vg, true
	}
	return VG{}, false
}

// GetPool returns a copy of the thin pool vg/name.
func (r *Runner) GetPool(vg, name string) (Pool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pool(vg, name); p != nil {
		return *p, true
	}
	return Pool{}, false
}

// GetLV returns a copy of the thin LV vg/name.
func (r *Runner) GetLV(vg, name string) (LV, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if lv := r.lv(vg, name); lv != nil {
		c := *lv
		c.Tags = slices.Clone(lv.Tags)
		return c, true
	}
	return LV{}, false
}

// ListLVs returns a copy of every thin LV, sorted by VG and name.
func (r *Runner) ListLVs() []LV {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LV, len(r.LVs))
	for i, lv := range r.LVs {
		lv.Tags = slices.Clone(lv.Tags)
		out[i] = lv
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VG != out[j].VG {
			return out[i].VG < out[j].VG
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// AddLV adds a thin LV, as something outside lvmd would.
func (r *Runner) AddLV(lv LV) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lv.Tags = slices.Clone(lv.Tags)
	r.LVs = append(r.LVs, lv)
}

// AddVGAndPool adds a volume group and a thin pool in it, as an
// administrator would (vgcreate, lvcreate --thinpool).
func (r *Runner) AddVGAndPool(vg VG, pool Pool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.VGs = append(r.VGs, vg)
	r.Pools = append(r.Pools, pool)
}

// SetPoolUsage sets a thin pool's data and metadata use, in percent. It
// panics when there is no such pool: that is a broken test.
func (r *Runner) SetPoolUsage(vg, pool string, data, metadata float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pool(vg, pool)
	if p == nil {
		panic(fmt.Sprintf("fake lvm: no thin pool %s/%s", vg, pool))
	}
	p.DataPercent, p.MetadataPercent = data, metadata
}

// The lookups below are called with mu held.

func (r *Runner) vg(name string) *VG {
	for i := range r.VGs {
		if r.VGs[i].Name == name {
			return &r.VGs[i]
		}
	}
	return nil
}

func (r *Runner) pool(vg, name string) *Pool {
	for i := range r.Pools {
		if r.Pools[i].VG == vg && r.Pools[i].Name == name {
			return &r.Pools[i]
		}
	}
	return nil
}

func (r *Runner) lv(vg, name string) *LV {
	for i := range r.LVs {
		if r.LVs[i].VG == vg && r.LVs[i].Name == name {
			return &r.LVs[i]
		}
	}
	return nil
}

func extentSize(vg *VG) uint64 {
	if vg.ExtentSize == 0 {
		return DefaultExtentSize
	}
	return vg.ExtentSize
}

// uuid makes a new UUID in lvm's 6-4-4-4-4-4-6 layout.
func (r *Runner) uuid() string {
	r.nextID++
	s := fmt.Sprintf("%028d", r.nextID)
	return strings.Join([]string{"fake" + s[:2], s[2:6], s[6:10], s[10:14], s[14:18], s[18:22], s[22:28]}, "-")
}

// SetPoolReadOnly makes a pool read-only, as the kernel does when its
// metadata fills, or writable again.
func (r *Runner) SetPoolReadOnly(vg, pool string, readOnly bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pool(vg, pool); p != nil {
		p.ReadOnly = readOnly
	}
}
