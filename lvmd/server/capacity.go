package server

import (
	"fmt"
	"math"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// managedTag marks every LV lvmd created; lvmd touches no other LV.
const managedTag = "thinlvm"

// capacity computes a device class's capacity from a report. A class whose
// volume group or thin pool is missing on this node is unavailable: its
// capacity says why and offers nothing, and lvmd serves the other classes
// (it picks the VG up at a refresh once an administrator made it).
func capacity(dc *config.DeviceClass, r *lvm.Report) *pb.DeviceClassCapacity {
	c := &pb.DeviceClassCapacity{
		DeviceClass:        dc.Name,
		VolumeGroup:        dc.VolumeGroup,
		ThinPool:           dc.ThinPool,
		Default:            dc.Default,
		OverprovisionRatio: dc.OverprovisionRatio,
		Type:               string(dc.Type),
	}
	if dc.IsThick() {
		return thickCapacity(c, dc, r)
	}
	vg, pool := r.VG(dc.VolumeGroup), r.LV(dc.VolumeGroup, dc.ThinPool)
	if vg != nil {
		c.VgSizeBytes, c.VgFreeBytes = vg.Size, vg.Free
	}
	if c.Unavailable = missing(dc, vg, pool); c.Unavailable != "" {
		return c
	}
	c.ThinPoolSizeBytes = pool.Size
	c.DataPercent = pool.DataPercent
	c.MetadataPercent = pool.MetadataPercent
	c.DataUsedBytes = uint64(float64(pool.Size) * pool.DataPercent / 100)
	c.PoolHealth = string(pool.Health())
	c.WhenFull = pool.WhenFull
	c.VgMetadataSizeBytes = vg.MetadataAreaSize
	c.VgMetadataFreeBytes = vg.MetadataAreaFree
	c.VgMetadataLvsLeft = metadataLVsLeft(vg)
	for i := range r.LVs {
		lv := &r.LVs[i]
		if lv.VG != dc.VolumeGroup || lv.Pool != dc.ThinPool || !lv.IsThin() {
			continue
		}
		c.VirtualBytes += lv.Size
		if lv.HasTag(managedTag) {
			c.LvCount++
		}
	}
	if !pool.Active() {
		// Deactivated by an administrator (to repair it, say): lvm reports
		// no use, and a new volume would activate it again.
		return c
	}
	if overHighWatermark(dc, c) {
		c.OverHighWatermark = true
		return c
	}
	if vg.MetadataAreaSize > 0 && c.VgMetadataLvsLeft == 0 {
		return c // no new volume: the VG's metadata area is full
	}
	// The pool can grow into the VG's free space when autoextend is on.
	pool0 := float64(pool.Size)
	if dc.AutoExtend != nil {
		pool0 += float64(vg.Free)
	}
	spare := float64(dc.Spare())
	ratio := dc.OverprovisionRatio
	// Room under the ratio, and real free data space times the ratio: a
	// pool whose volumes are mostly written offers less than the ratio says.
	virtualRoom := pool0*ratio - float64(c.VirtualBytes) - spare
	physicalRoom := (pool0 - float64(c.DataUsedBytes) - spare) * ratio
	avail := min(virtualRoom, physicalRoom)
	if avail > 0 {
		c.AvailableBytes = uint64(avail)
	}
	return c
}

// thickCapacity fills c for a thick class: its LVs take the VG's extents
// as they are made, so what it offers is the VG's free space less the
// spare (and nothing once the VG's metadata area is full).
func thickCapacity(c *pb.DeviceClassCapacity, dc *config.DeviceClass, r *lvm.Report) *pb.DeviceClassCapacity {
	vg := r.VG(dc.VolumeGroup)
	if c.Unavailable = missing(dc, vg, nil); c.Unavailable != "" {
		return c
	}
	c.VgSizeBytes, c.VgFreeBytes = vg.Size, vg.Free
	c.VgMetadataSizeBytes = vg.MetadataAreaSize
	c.VgMetadataFreeBytes = vg.MetadataAreaFree
	c.VgMetadataLvsLeft = metadataLVsLeft(vg)
	for i := range r.LVs {
		lv := &r.LVs[i]
		if lv.VG == dc.VolumeGroup && lv.Pool == "" && lv.HasTag(managedTag) {
			c.VirtualBytes += lv.Size
			c.LvCount++
		}
	}
	if vg.MetadataAreaSize > 0 && c.VgMetadataLvsLeft == 0 {
		return c
	}
	if spare := dc.Spare(); vg.Free > spare {
		c.AvailableBytes = vg.Free - spare
	}
	return c
}

// missing says why a device class cannot serve volumes on this node, from
// its volume group and thin pool as the report has them (nil when it has
// none): one is not there; "" when both are (a thick class's VG alone).
func missing(dc *config.DeviceClass, vg *lvm.VG, pool *lvm.LV) string {
	switch {
	case vg == nil:
		return fmt.Sprintf("volume group %s not found", dc.VolumeGroup)
	case dc.IsThick():
		return "" // no pool
	case pool == nil:
		return fmt.Sprintf("thin pool %s/%s not found", dc.VolumeGroup, dc.ThinPool)
	case !pool.IsThinPool():
		return fmt.Sprintf("%s/%s is not a thin pool", dc.VolumeGroup, dc.ThinPool)
	}
	return ""
}

// unavailable is the error of a request to a device class that is missing
// why (missing).
func unavailable(dc *config.DeviceClass, why string) error {
	return fmt.Errorf("%w: device class %s: %s on this node", lvm.ErrUnavailable, dc.Name, why)
}

func overHighWatermark(dc *config.DeviceClass, c *pb.DeviceClassCapacity) bool {
	return c.DataPercent > dc.DataHighWatermarkPercent || c.MetadataPercent > dc.MetadataHighWatermarkPercent
}

// roundUp rounds size up to a multiple of unit, as lvm rounds LV sizes to
// the VG's extent size. A size too large to round saturates to
// math.MaxUint64 instead of wrapping to 0: no pool has room for it.
func roundUp(size, unit uint64) uint64 {
	if unit == 0 {
		return size
	}
	if size > math.MaxUint64-(unit-1) {
		return math.MaxUint64
	}
	return (size + unit - 1) / unit * unit
}

// The VG metadata area. lvm2 keeps the whole VG's text metadata in each
// PV's metadata area and rewrites it on every change; each LV adds its
// section to that text. Measured on lvm2 2.03.16 (docs/benchmarks.md, "A
// node full of LVs"): a thin LV named pvc-<uuid> with the tags thinlvm and
// lv:pvc-<uuid> adds 395 bytes, a thin snapshot about 55 more (its origin).
const (
	// metadataLVBytes is the section of a thin LV or snapshot less its
	// name, tags and origin, rounded up from the measurement (about 300
	// bytes; a snapshot's origin line adds about 15 besides the name).
	metadataLVBytes = 384
	// metadataTypicalLVBytes is a typical LV's whole section, the unit of
	// vg_metadata_lvs_left: a thin snapshot with a pvc-<uuid> name and
	// tags, rounded up.
	metadataTypicalLVBytes = 512
	// metadataReserveBytes is the room lvmd keeps free in the VG's
	// metadata when it creates an LV: about 20 LVs' worth, for what grows
	// the metadata without lvmd's check (tag changes, a pool's autoextend,
	// LVs made outside lvmd since the last report) and for its estimates'
	// error (lvm reports the free space in whole sectors). Removing an LV
	// shrinks the metadata and always has room.
	metadataReserveBytes = 8 << 10
)

// metadataBytes estimates what one new LV of this name, tags and origin
// ("" for none) adds to its VG's metadata: lvm writes the names once and
// each tag quoted, with a separator.
func metadataBytes(name, origin string, tags []string) uint64 {
	return uint64(metadataLVBytes+len(name)+len(origin)) + tagsMetadataBytes(tags)
}

// tagsMetadataBytes is what tags add to an LV's section: each quoted, with
// a separator.
func tagsMetadataBytes(tags []string) uint64 {
	var n uint64
	for _, t := range tags {
		n += uint64(len(t)) + 4
	}
	return n
}

// metadataLVsLeft is how many more typical LVs lvmd creates in vg before
// its metadata area is too full; 0 when it is not known (no vg_mda_size).
func metadataLVsLeft(vg *lvm.VG) uint32 {
	if vg.MetadataAreaSize == 0 || vg.MetadataAreaFree < metadataReserveBytes {
		return 0
	}
	return uint32(min((vg.MetadataAreaFree-metadataReserveBytes)/metadataTypicalLVBytes, math.MaxUint32))
}

// metadataMaxCopy is the largest copy of the VG's metadata an area of
// size bytes takes: lvm2's max_size, half the area less its header sector,
// less a sector for alignment.
func metadataMaxCopy(size uint64) uint64 {
	if size < 3*512 {
		return 0
	}
	return (size-512)/2 - 512
}

// checkMetadataRoom refuses a new LV whose metadata (need bytes, from
// metadataBytes) would not fit in its VG's metadata area with lvmd's
// reserve left. A transient snapshot (the point in time a copy to another
// node reads, removed soon after) may use half of the reserve, so that a
// full node still serves its volumes' data.
func checkMetadataRoom(dc *config.DeviceClass, r *lvm.Report, need uint64, transient bool) error {
	vg := r.VG(dc.VolumeGroup)
	if vg == nil {
		return fmt.Errorf("volume group %s: %w", dc.VolumeGroup, lvm.ErrNotFound)
	}
	if vg.MetadataAreaSize == 0 {
		return nil // not reported: lvm's own refusal is classified as the same error
	}
	reserve := uint64(metadataReserveBytes)
	if transient {
		reserve /= 2
	}
	if vg.MetadataAreaFree >= need+reserve {
		return nil
	}
	limit := metadataMaxCopy(vg.MetadataAreaSize)
	used := limit - min(vg.MetadataAreaFree, limit)
	return fmt.Errorf("%w: volume group %q metadata area is full: %d of %d bytes used (its PVs' metadata areas are %d bytes, and lvm keeps two copies in each); "+
		"a new LV takes about %d bytes and lvmd keeps %d free for removals and tag changes; remove volumes, or move the VG to PVs with a larger metadata area (pvcreate --metadatasize)",
		lvm.ErrVGMetadataFull, dc.VolumeGroup, used, limit, vg.MetadataAreaSize, need, reserve)
}

// useMetadata lowers vg's free metadata space in an amended view by what a
// change lvm confirmed added, so that creates that follow before the next
// report decide on no more room than there is. A removal gives nothing
// back until lvm is read again: the view errs on the full side.
func useMetadata(r *lvm.Report, vgName string, bytes uint64) {
	if vg := r.VG(vgName); vg != nil {
		vg.MetadataAreaFree -= min(vg.MetadataAreaFree, bytes)
	}
}

// useExtents lowers vg's free space in an amended view by what a thick LV,
// its growth or a copy-on-write store lvm confirmed took, so that creates
// that follow before the next report decide on no more room than there is.
func useExtents(r *lvm.Report, vgName string, bytes uint64) {
	if vg := r.VG(vgName); vg != nil {
		vg.Free -= min(vg.Free, bytes)
	}
}
