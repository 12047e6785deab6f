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

// capacity computes a device class's capacity from a report.
func capacity(dc *config.DeviceClass, r *lvm.Report) (*pb.DeviceClassCapacity, error) {
	vg := r.VG(dc.VolumeGroup)
	if vg == nil {
		return nil, fmt.Errorf("device class %s: volume group %s: %w", dc.Name, dc.VolumeGroup, lvm.ErrNotFound)
	}
	pool := r.LV(dc.VolumeGroup, dc.ThinPool)
	if pool == nil || !pool.IsThinPool() {
		return nil, fmt.Errorf("device class %s: thin pool %s/%s: %w", dc.Name, dc.VolumeGroup, dc.ThinPool, lvm.ErrNotFound)
	}
	c := &pb.DeviceClassCapacity{
		DeviceClass:        dc.Name,
		VolumeGroup:        dc.VolumeGroup,
		ThinPool:           dc.ThinPool,
		Default:            dc.Default,
		VgSizeBytes:        vg.Size,
		VgFreeBytes:        vg.Free,
		ThinPoolSizeBytes:  pool.Size,
		DataPercent:        pool.DataPercent,
		MetadataPercent:    pool.MetadataPercent,
		DataUsedBytes:      uint64(float64(pool.Size) * pool.DataPercent / 100),
		OverprovisionRatio: dc.OverprovisionRatio,
		PoolHealth:         string(pool.Health()),
		WhenFull:           pool.WhenFull,
	}
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
		return c, nil
	}
	if overHighWatermark(dc, c) {
		c.OverHighWatermark = true
		return c, nil
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
	return c, nil
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
