package server

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/thinlvm/thinlvm/api/lvmname"
	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// GetThinDelta reads the ranges from the pool's metadata: a metadata
// snapshot is reserved, thin_delta reads it, and it is released whatever
// happened, all under the lock, so that no lvm command runs while the pool
// holds it and only one is held at a time. Without a base, thin_delta
// compares the LV with itself: every block it maps is then "same", and
// thin_delta's output is the mapped ranges (as thin_dump's would be, with
// the one parser).
func (s *lvService) GetThinDelta(ctx context.Context, req *pb.GetThinDeltaRequest) (*pb.GetThinDeltaResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), nil)
	if err != nil {
		return nil, err
	}
	if b := req.GetBaseName(); b != "" {
		if err := lvmname.ValidateLVName(b); err != nil {
			return nil, fmt.Errorf("base: %w", err)
		}
		if b == r.name {
			return nil, fmt.Errorf("%w: lv %q is its own base", lvm.ErrInvalid, b)
		}
	}
	if r.dc.IsThick() {
		return d.thickExtent(r, req.GetBaseName())
	}
	resp := &pb.GetThinDeltaResponse{}
	err = d.mutate(ctx, func(mctx context.Context) error {
		lv, base, pool, err := d.deltaLVs(mctx, r, req.GetBaseName())
		if err != nil {
			return err
		}
		baseID := lv.ThinID
		if base != nil {
			baseID = base.ThinID
		}
		delta, err := d.thinDelta(mctx, r.dc, baseID, lv.ThinID)
		if err != nil {
			return err
		}
		if delta.BlockSize() != pool.ChunkSize {
			return fmt.Errorf("thin_delta reports blocks of %d bytes, lvm a chunk size of %d for thin pool %s/%s",
				delta.BlockSize(), pool.ChunkSize, pool.VG, pool.Name)
		}
		ranges, err := delta.CopyRanges(lv.Size)
		if err != nil {
			return err
		}
		resp.BlockSizeBytes, resp.SizeBytes = delta.BlockSize(), lv.Size
		for _, br := range ranges {
			resp.Ranges = append(resp.Ranges, &pb.ThinRange{OffsetBytes: br.Offset, LengthBytes: br.Length, Zero: br.Zero})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// thickExtent is the "delta" of a thick LV: it maps all of itself, so a
// reader copies it whole. Its blocks are the VG's extents.
func (d *Daemon) thickExtent(r request, baseName string) (*pb.GetThinDeltaResponse, error) {
	if baseName != "" {
		return nil, fmt.Errorf("%w: device class %s is thick: its LVs descend from no base", lvm.ErrInvalid, r.dc.Name)
	}
	lv, err := lookup(d.store.current().report, r)
	if err != nil {
		return nil, err
	}
	if lv == nil {
		return nil, r.notFound()
	}
	ext, err := d.extentSize(r.dc)
	if err != nil {
		return nil, err
	}
	size := d.sizeOf(r.dc, lv)
	return &pb.GetThinDeltaResponse{BlockSizeBytes: ext, SizeBytes: size,
		Ranges: []*pb.ThinRange{{OffsetBytes: 0, LengthBytes: size}}}, nil
}

// deltaLVs finds the LV, its base (nil without) and their pool in the
// report, with their thin ids and the pool's chunk size: a report lvmd
// amended after creating an LV lacks them, and is re-read then. Called with
// the lock held.
func (d *Daemon) deltaLVs(ctx context.Context, r request, baseName string) (lv, base, pool *lvm.LV, err error) {
	for reread := false; ; reread = true {
		rep := d.store.current().report
		if lv, err = deltaLV(rep, r); err != nil {
			return nil, nil, nil, err
		}
		if baseName != "" {
			if base, err = deltaLV(rep, request{dc: r.dc, name: baseName}); err != nil {
				return nil, nil, nil, fmt.Errorf("base: %w", err)
			}
		}
		pool = rep.LV(r.dc.VolumeGroup, r.dc.ThinPool)
		if pool == nil || !pool.IsThinPool() {
			return nil, nil, nil, fmt.Errorf("%w: thin pool %s/%s of device class %s", lvm.ErrNotFound, r.dc.VolumeGroup, r.dc.ThinPool, r.dc.Name)
		}
		known := lv.ThinID != 0 && (base == nil || base.ThinID != 0) && pool.ChunkSize != 0
		if known {
			break
		}
		if reread {
			return nil, nil, nil, fmt.Errorf("lvm reports no thin id for lv %s/%s or its base, or no chunk size for its pool", lv.VG, lv.Name)
		}
		if err := d.store.refreshLocked(ctx); err != nil {
			return nil, nil, nil, err
		}
	}
	// The -tpool device exists while the pool or one of its thin LVs is
	// active; a pool activated by a thin LV alone shows no "a" itself. lvmd
	// does not activate a pool an administrator deactivated (see checkRoom).
	live := pool.Active() || slices.ContainsFunc(d.store.current().report.LVs, func(o lvm.LV) bool {
		return o.VG == pool.VG && o.Pool == pool.Name && o.Active()
	})
	if !live {
		return nil, nil, nil, fmt.Errorf("%w: thin pool %s/%s and all its thin LVs are inactive: its metadata cannot be read; activate the pool or one of its LVs (lvchange -ay)",
			lvm.ErrNotActive, pool.VG, pool.Name)
	}
	return lv, base, pool, nil
}

// deltaLV is the lvmd thin LV of r in rep.
func deltaLV(rep *lvm.Report, r request) (*lvm.LV, error) {
	lv, err := lookup(rep, r)
	if err != nil {
		return nil, err
	}
	if lv == nil {
		return nil, r.notFound()
	}
	if !lv.IsThin() {
		return nil, fmt.Errorf("%w: lv %s/%s is not a thin LV", lvm.ErrNotManaged, lv.VG, lv.Name)
	}
	return lv, nil
}

// thinDelta runs thin_delta on a metadata snapshot of dc's pool, and always
// releases the snapshot it reserved: with a context of its own, so that
// neither the caller going away nor the mutation's bound keeps it held. A
// snapshot found held is one lvmd left (it died or failed to release
// between the two): lvmd is the only reader of its pools' metadata, so it
// releases it and reserves again. Called with the lock held.
func (d *Daemon) thinDelta(ctx context.Context, dc *config.DeviceClass, base, id uint32) (delta *lvm.ThinDelta, err error) {
	vg, pool := dc.VolumeGroup, dc.ThinPool
	err = d.lvm.ReserveMetadataSnap(ctx, vg, pool)
	if errors.Is(err, lvm.ErrMetadataSnapHeld) {
		d.log.Info("thin pool holds a metadata snapshot lvmd did not release; releasing it", "deviceClass", dc.Name)
		if err = d.lvm.ReleaseMetadataSnap(ctx, vg, pool); err == nil {
			err = d.lvm.ReserveMetadataSnap(ctx, vg, pool)
		}
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.CommandTimeout)
		defer cancel()
		if rerr := d.lvm.ReleaseMetadataSnap(rctx, vg, pool); rerr != nil {
			delta, err = nil, errors.Join(err, rerr)
		}
	}()
	return d.lvm.ThinDelta(ctx, vg, pool, base, id)
}
