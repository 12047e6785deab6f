package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/thinlvm/thinlvm/api/lvmname"
	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

type lvService struct {
	pb.UnimplementedLVServiceServer
	d *Daemon
}

var _ pb.LVServiceServer = (*lvService)(nil)

// request is the validated common part of an LV request.
type request struct {
	dc   *config.DeviceClass
	name string
}

func (d *Daemon) validate(name, class string, tags []string) (request, error) {
	if err := lvmname.ValidateLVName(name); err != nil {
		return request{}, err
	}
	for _, t := range tags {
		if err := lvmname.ValidateTag(t); err != nil {
			return request{}, err
		}
	}
	dc, err := d.class(class)
	if err != nil {
		return request{}, err
	}
	return request{dc: dc, name: name}, nil
}

// lookup finds the LV of a request in r. It returns nil when there is no LV
// of that name in the VG, and lvm.ErrNotManaged (wrapped) when there is one that
// lvmd does not own in this device class.
func lookup(r *lvm.Report, req request) (*lvm.LV, error) {
	lv := r.LV(req.dc.VolumeGroup, req.name)
	if lv == nil {
		return nil, nil
	}
	if !lv.HasTag(managedTag) {
		return lv, fmt.Errorf("%w: lv %s/%s exists without the %q tag", lvm.ErrNotManaged, lv.VG, lv.Name, managedTag)
	}
	if lv.Pool != req.dc.ThinPool {
		return lv, fmt.Errorf("%w: lv %s/%s belongs to thin pool %q, not to device class %s", lvm.ErrNotManaged, lv.VG, lv.Name, lv.Pool, req.dc.Name)
	}
	return lv, nil
}

func (d *Daemon) toProto(dc *config.DeviceClass, lv *lvm.LV) *pb.LogicalVolume {
	return &pb.LogicalVolume{
		Name: lv.Name, DeviceClass: dc.Name, VolumeGroup: lv.VG, SizeBytes: d.sizeOf(dc, lv),
		DevicePath: d.devicePath(lv.VG, lv.Name), Origin: lv.Origin,
		Tags: append([]string(nil), lv.Tags...), ReadOnly: lv.ReadOnly(), Active: lv.Active(), Uuid: lv.UUID,
		Thick: dc.IsThick(),
	}
}

// sizeOf is the size a reader of lv sees. lvm reports a thick LV's
// copy-on-write snapshot at the size of its store; its device is its
// origin's size.
func (d *Daemon) sizeOf(dc *config.DeviceClass, lv *lvm.LV) uint64 {
	if dc.IsThick() && lv.Origin != "" {
		if o := d.store.current().report.LV(lv.VG, lv.Origin); o != nil {
			return o.Size
		}
	}
	return lv.Size
}

// devicePath is where lvm makes an LV's device node.
func (d *Daemon) devicePath(vg, name string) string {
	return filepath.Join(d.opts.DevDir, vg, name)
}

// checkRoom refuses a new virtual size of need bytes when the pool is
// inactive or over its high-water mark or the device class has less
// available. An over-full pool with autoextend on is grown first. Called with
// the lock held.
//
// A transient snapshot (need 0) is checked only for the
// pool's state and high-water mark: it adds no data and goes soon.
func (d *Daemon) checkRoom(ctx context.Context, dc *config.DeviceClass, need uint64) error {
	c := capacity(dc, d.store.current().report)
	if c.Unavailable != "" {
		return unavailable(dc, c.Unavailable)
	}
	if dc.IsThick() {
		if need > c.AvailableBytes {
			return fmt.Errorf("%w: %d bytes requested, device class %s has %d bytes available (volume group %s: %d bytes free, %d kept spare)",
				lvm.ErrInsufficientSpace, need, dc.Name, c.AvailableBytes, dc.VolumeGroup, c.VgFreeBytes, dc.Spare())
		}
		return nil
	}
	// lvcreate would activate a pool an administrator deactivated, e.g. to
	// run lvconvert --repair, which then refuses an active pool.
	if pool := d.store.current().report.LV(dc.VolumeGroup, dc.ThinPool); !pool.Active() {
		return fmt.Errorf("%w: thin pool %s/%s is not active (deactivated for maintenance such as lvconvert --repair?); activate it with lvchange -ay",
			lvm.ErrInsufficientSpace, dc.VolumeGroup, dc.ThinPool)
	}
	if dc.AutoExtend != nil && d.needsExtend(dc, d.store.current().report) {
		if err := d.store.refreshLocked(ctx); err != nil { // refreshLocked runs the autoextend
			return err
		}
		if c = capacity(dc, d.store.current().report); c.Unavailable != "" {
			return unavailable(dc, c.Unavailable)
		}
	}
	if overHighWatermark(dc, c) {
		return fmt.Errorf("%w: thin pool %s/%s is over its high-water mark: data %.2f%% (limit %g%%), metadata %.2f%% (limit %g%%)",
			lvm.ErrInsufficientSpace, dc.VolumeGroup, dc.ThinPool, c.DataPercent, dc.DataHighWatermarkPercent, c.MetadataPercent, dc.MetadataHighWatermarkPercent)
	}
	if need > c.AvailableBytes {
		return fmt.Errorf("%w: %d bytes requested, device class %s has %d bytes available (thin pool %s/%s: data %.2f%%, metadata %.2f%%, %d of %d bytes allocated virtually, overprovision ratio %g)",
			lvm.ErrInsufficientSpace, need, dc.Name, c.AvailableBytes, dc.VolumeGroup, dc.ThinPool, c.DataPercent, c.MetadataPercent, c.VirtualBytes, c.ThinPoolSizeBytes, dc.OverprovisionRatio)
	}
	return nil
}

// extentSize is the class's VG's extent size: the first thing every
// request that makes or grows an LV asks, so it refuses a class whose VG or
// thin pool is missing (FailedPrecondition).
func (d *Daemon) extentSize(dc *config.DeviceClass) (uint64, error) {
	r := d.store.current().report
	vg := r.VG(dc.VolumeGroup)
	if why := missing(dc, vg, r.LV(dc.VolumeGroup, dc.ThinPool)); why != "" {
		return 0, unavailable(dc, why)
	}
	return vg.ExtentSize, nil
}

func withTags(tags []string) []string {
	out := []string{managedTag}
	for _, t := range tags {
		if t != managedTag {
			out = append(out, t)
		}
	}
	return out
}

// retryOnExists runs decide as a mutation (mutate); when lvm says the LV
// exists although the cached report did not show it (made outside lvmd
// since the last refresh), it refreshes once and runs decide again.
func (d *Daemon) retryOnExists(ctx context.Context, decide func(mctx context.Context) (*pb.LogicalVolume, bool, error)) (*pb.LogicalVolume, error) {
	var lv *pb.LogicalVolume
	err := d.mutate(ctx, func(mctx context.Context) error {
		for attempt := 0; ; attempt++ {
			var done bool
			var err error
			lv, done, err = decide(mctx)
			if err == nil || done || attempt > 0 || !errors.Is(err, lvm.ErrExists) {
				return err
			}
			if rerr := d.store.refreshLocked(mctx); rerr != nil {
				return errors.Join(err, rerr)
			}
		}
	})
	return lv, err
}

func (s *lvService) CreateLV(ctx context.Context, req *pb.CreateLVRequest) (*pb.CreateLVResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), req.GetTags())
	if err != nil {
		return nil, err
	}
	if req.GetSizeBytes() == 0 {
		return nil, fmt.Errorf("%w: size_bytes must be > 0", lvm.ErrInvalid)
	}
	vol, err := d.retryOnExists(ctx, func(mctx context.Context) (*pb.LogicalVolume, bool, error) {
		ext, err := d.extentSize(r.dc)
		if err != nil {
			return nil, true, err
		}
		size := roundUp(req.GetSizeBytes(), ext)
		existing, err := lookup(d.store.current().report, r)
		if err != nil {
			return nil, true, fmt.Errorf("%w: %w", lvm.ErrConflict, err)
		}
		if existing != nil {
			if existing.Origin != "" || existing.Size != size {
				return nil, true, fmt.Errorf("%w: lv %s/%s exists with size %d and origin %q, requested size %d and no origin",
					lvm.ErrConflict, existing.VG, existing.Name, existing.Size, existing.Origin, size)
			}
			return d.toProto(r.dc, existing), true, nil
		}
		tags := withTags(req.GetTags())
		meta := metadataBytes(r.name, "", tags)
		if err := checkMetadataRoom(r.dc, d.store.current().report, meta, false); err != nil {
			return nil, true, err
		}
		if err := d.checkRoom(mctx, r.dc, size); err != nil {
			return nil, true, err
		}
		lv := lvm.LV{Name: r.name, VG: r.dc.VolumeGroup, Size: size, Attr: "Vwi-a-tz--", Pool: r.dc.ThinPool, Tags: tags,
			Path: d.devicePath(r.dc.VolumeGroup, r.name)}
		if r.dc.IsThick() {
			err = d.lvm.CreateLinear(mctx, lvm.LinearSpec{VG: r.dc.VolumeGroup, Name: r.name, Size: size, Tags: tags, ExtraArgs: r.dc.LVCreateOptions})
			lv.Attr = "-wi-a-----"
		} else {
			err = d.lvm.CreateThin(mctx, lvm.ThinSpec{VG: r.dc.VolumeGroup, Pool: r.dc.ThinPool, Name: r.name, Size: size, Tags: tags, ExtraArgs: r.dc.LVCreateOptions})
		}
		if err != nil {
			return nil, false, err
		}
		d.store.amend(func(rep *lvm.Report) {
			rep.LVs = append(rep.LVs, lv)
			if r.dc.IsThick() {
				useExtents(rep, r.dc.VolumeGroup, size)
			}
			useMetadata(rep, r.dc.VolumeGroup, meta)
		})
		return d.toProto(r.dc, &lv), true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.CreateLVResponse{Volume: vol}, nil
}

func (s *lvService) CreateSnapshot(ctx context.Context, req *pb.CreateSnapshotRequest) (*pb.CreateSnapshotResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), req.GetTags())
	if err != nil {
		return nil, err
	}
	if err := lvmname.ValidateLVName(req.GetSourceName()); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if req.GetSourceName() == req.GetName() {
		return nil, fmt.Errorf("%w: snapshot and source have the same name %q", lvm.ErrInvalid, req.GetName())
	}
	if req.GetTransient() && (!req.GetReadOnly() || req.GetSizeBytes() > 0) {
		return nil, fmt.Errorf("%w: a transient snapshot is read-only, of its source's size", lvm.ErrInvalid)
	}
	if r.dc.IsThick() {
		if !req.GetTransient() {
			return nil, fmt.Errorf("%w: device class %s is thick: its volumes have no snapshots (and golden images need a thin class); use a thin device class",
				lvm.ErrThick, r.dc.Name)
		}
		vol, err := d.retryOnExists(ctx, func(mctx context.Context) (*pb.LogicalVolume, bool, error) {
			return d.cowSnapshot(mctx, r, req)
		})
		if err != nil {
			return nil, err
		}
		return &pb.CreateSnapshotResponse{Volume: vol}, nil
	}
	vol, err := d.retryOnExists(ctx, func(mctx context.Context) (*pb.LogicalVolume, bool, error) {
		rep := d.store.current().report
		src, err := lookup(rep, request{dc: r.dc, name: req.GetSourceName()})
		if src == nil || err != nil {
			return nil, true, fmt.Errorf("%w: source lv %s/%s in device class %s", lvm.ErrNotFound, r.dc.VolumeGroup, req.GetSourceName(), r.dc.Name)
		}
		ext, err := d.extentSize(r.dc)
		if err != nil {
			return nil, true, err
		}
		size := src.Size
		if req.GetSizeBytes() > 0 {
			if size = roundUp(req.GetSizeBytes(), ext); size < src.Size {
				return nil, true, fmt.Errorf("%w: snapshot size %d is smaller than source %s size %d", lvm.ErrShrink, size, src.Name, src.Size)
			}
		}
		existing, err := lookup(rep, r)
		if err != nil {
			return nil, true, fmt.Errorf("%w: %w", lvm.ErrConflict, err)
		}
		if existing != nil {
			if req.GetSizeBytes() == 0 && existing.Size <= src.Size {
				size = existing.Size // the source's size when it was made: a retry after the source grew does not resize
			}
			if existing.Origin != src.Name || existing.ReadOnly() != req.GetReadOnly() || existing.Size > size {
				return nil, true, fmt.Errorf("%w: lv %s/%s exists with origin %q, size %d, read-only %t; requested origin %q, size %d, read-only %t",
					lvm.ErrConflict, existing.VG, existing.Name, existing.Origin, existing.Size, existing.ReadOnly(), src.Name, size, req.GetReadOnly())
			}
			if existing.Size < size { // a restart between create and extend: finish the work
				if err := d.extend(mctx, r.dc, existing.Name, size); err != nil {
					return nil, true, err
				}
				existing = d.store.current().report.LV(r.dc.VolumeGroup, r.name)
			}
			return d.toProto(r.dc, existing), true, nil
		}
		need := size
		if req.GetTransient() {
			need = 0 // not counted against the overprovision ratio
		}
		tags := withTags(req.GetTags())
		meta := metadataBytes(r.name, src.Name, tags)
		if err := checkMetadataRoom(r.dc, rep, meta, req.GetTransient()); err != nil {
			return nil, true, err
		}
		if err := d.checkRoom(mctx, r.dc, need); err != nil {
			return nil, true, err
		}
		err = d.lvm.CreateThinSnapshot(mctx, lvm.SnapshotSpec{VG: r.dc.VolumeGroup, Source: src.Name, Name: r.name,
			ReadOnly: req.GetReadOnly(), Activate: true, Tags: tags, ExtraArgs: r.dc.LVCreateOptions})
		if err != nil {
			return nil, false, err
		}
		attr := "Vwi-a-tz--"
		if req.GetReadOnly() {
			attr = "Vri-a-tz--"
		}
		lv := lvm.LV{Name: r.name, VG: r.dc.VolumeGroup, Size: src.Size, Attr: attr, Origin: src.Name, Pool: r.dc.ThinPool,
			Tags: tags, Path: d.devicePath(r.dc.VolumeGroup, r.name)}
		d.store.amend(func(rep *lvm.Report) {
			rep.LVs = append(rep.LVs, lv)
			useMetadata(rep, r.dc.VolumeGroup, meta)
		})
		if size > src.Size {
			if err := d.extend(mctx, r.dc, r.name, size); err != nil {
				// Leave nothing half-made: a snapshot of the wrong size would
				// be returned by the next, idempotent call.
				if rerr := d.remove(mctx, r.dc, r.name); rerr != nil {
					return nil, true, errors.Join(err, fmt.Errorf("roll back snapshot: %w", rerr))
				}
				return nil, true, err
			}
			lv.Size = size
		}
		return d.toProto(r.dc, &lv), true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.CreateSnapshotResponse{Volume: vol}, nil
}

// cowStoreSize is a copy-on-write store that never fills, whatever is
// rewritten of a source of size bytes: the source's blocks, and the
// exception store's metadata, 16 bytes per 4 KiB chunk (lvm's default
// chunk for such snapshots) plus its header, taken as 1/128 of the size
// and an extent, in whole extents. lvm trims a store larger than it needs.
func cowStoreSize(size, ext uint64) uint64 {
	return roundUp(size+size/128+ext, ext)
}

// cowSnapshot makes the transient snapshot of a thick LV: lvm's
// copy-on-write kind, read-only, its store as large as the source and its
// metadata when the class has the room (it never fills then,
// cowStoreSize), else all the room there is: it
// fills, and lvm invalidates it, only if the source is rewritten more than
// that while the copy reads it, and the copy fails then. Called with the
// lock held.
func (d *Daemon) cowSnapshot(ctx context.Context, r request, req *pb.CreateSnapshotRequest) (*pb.LogicalVolume, bool, error) {
	rep := d.store.current().report
	src, err := lookup(rep, request{dc: r.dc, name: req.GetSourceName()})
	if src == nil || err != nil {
		return nil, true, fmt.Errorf("%w: source lv %s/%s in device class %s", lvm.ErrNotFound, r.dc.VolumeGroup, req.GetSourceName(), r.dc.Name)
	}
	existing, err := lookup(rep, r)
	if err != nil {
		return nil, true, fmt.Errorf("%w: %w", lvm.ErrConflict, err)
	}
	if existing != nil {
		if existing.Origin != src.Name || !existing.ReadOnly() {
			return nil, true, fmt.Errorf("%w: lv %s/%s exists with origin %q, read-only %t; requested a read-only snapshot of %q",
				lvm.ErrConflict, existing.VG, existing.Name, existing.Origin, existing.ReadOnly(), src.Name)
		}
		return d.toProto(r.dc, existing), true, nil
	}
	if src.Origin != "" {
		return nil, true, fmt.Errorf("%w: lv %s/%s is a snapshot itself", lvm.ErrInvalid, src.VG, src.Name)
	}
	ext, err := d.extentSize(r.dc)
	if err != nil {
		return nil, true, err
	}
	c := capacity(r.dc, rep)
	cow := min(cowStoreSize(src.Size, ext), c.AvailableBytes/ext*ext)
	if cow == 0 {
		return nil, true, fmt.Errorf("%w: device class %s has no room for the copy-on-write store of a snapshot of %s (volume group %s: %d bytes free, %d kept spare)",
			lvm.ErrInsufficientSpace, r.dc.Name, src.Name, r.dc.VolumeGroup, c.VgFreeBytes, r.dc.Spare())
	}
	tags := withTags(req.GetTags())
	meta := metadataBytes(r.name, src.Name, tags)
	if err := checkMetadataRoom(r.dc, rep, meta, true); err != nil {
		return nil, true, err
	}
	if err := d.lvm.CreateCOWSnapshot(ctx, lvm.COWSnapshotSpec{VG: r.dc.VolumeGroup, Source: src.Name, Name: r.name, COWSize: cow, Tags: tags}); err != nil {
		return nil, false, err
	}
	lv := lvm.LV{Name: r.name, VG: r.dc.VolumeGroup, Size: cow, Attr: "sri-a-s---", Origin: src.Name, Tags: tags,
		Path: d.devicePath(r.dc.VolumeGroup, r.name)}
	d.store.amend(func(rep *lvm.Report) {
		rep.LVs = append(rep.LVs, lv)
		useExtents(rep, r.dc.VolumeGroup, cow)
		useMetadata(rep, r.dc.VolumeGroup, meta)
	})
	return d.toProto(r.dc, &lv), true, nil
}

// extend grows an LV and amends the view. Called with the lock held.
func (d *Daemon) extend(ctx context.Context, dc *config.DeviceClass, name string, size uint64) error {
	err := d.lvm.Extend(ctx, dc.VolumeGroup, name, size)
	if err != nil && !errors.Is(err, lvm.ErrSizeUnchanged) {
		return err
	}
	d.store.amend(func(rep *lvm.Report) {
		lv := rep.LV(dc.VolumeGroup, name)
		if lv == nil {
			return
		}
		if dc.IsThick() && size > lv.Size {
			useExtents(rep, dc.VolumeGroup, size-lv.Size)
		}
		lv.Size = size
	})
	return nil
}

// remove removes an LV and amends the view. Called with the lock held.
func (d *Daemon) remove(ctx context.Context, dc *config.DeviceClass, name string) error {
	err := d.lvm.Remove(ctx, dc.VolumeGroup, name)
	if err != nil && !errors.Is(err, lvm.ErrNotFound) {
		return err
	}
	d.store.amend(func(rep *lvm.Report) {
		vg := rep.VG(dc.VolumeGroup)
		lvs := rep.LVs[:0]
		for _, lv := range rep.LVs {
			// A thick LV gives its extents back, and its copy-on-write
			// snapshots go with it (lvremove removes them).
			if dc.IsThick() && lv.VG == dc.VolumeGroup && (lv.Name == name || lv.Origin == name && lv.Pool == "") {
				if vg != nil {
					vg.Free += lv.Size
				}
				continue
			}
			if lv.VG == dc.VolumeGroup && lv.Name == name {
				continue
			}
			if lv.VG == dc.VolumeGroup && lv.Origin == name {
				lv.Origin = "" // thin snapshots outlive their origin
			}
			lvs = append(lvs, lv)
		}
		rep.LVs = lvs
	})
	return nil
}

// withLV runs f as a mutation (mutate) with the cached LV of r: nil when
// absent, an error when it is not lvmd's.
func (d *Daemon) withLV(ctx context.Context, r request, f func(mctx context.Context, lv *lvm.LV) error) error {
	return d.mutate(ctx, func(mctx context.Context) error {
		lv, err := lookup(d.store.current().report, r)
		if err != nil {
			return err
		}
		return f(mctx, lv)
	})
}

func (r request) notFound() error {
	return fmt.Errorf("%w: lv %s/%s", lvm.ErrNotFound, r.dc.VolumeGroup, r.name)
}

func (s *lvService) ResizeLV(ctx context.Context, req *pb.ResizeLVRequest) (*pb.ResizeLVResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), nil)
	if err != nil {
		return nil, err
	}
	if req.GetSizeBytes() == 0 {
		return nil, fmt.Errorf("%w: size_bytes must be > 0", lvm.ErrInvalid)
	}
	resp := &pb.ResizeLVResponse{}
	err = d.withLV(ctx, r, func(mctx context.Context, lv *lvm.LV) error {
		if lv == nil {
			return r.notFound()
		}
		ext, err := d.extentSize(r.dc)
		if err != nil {
			return err
		}
		size := roundUp(req.GetSizeBytes(), ext)
		switch {
		case size < lv.Size:
			return fmt.Errorf("%w: lv %s/%s is %d bytes, requested %d: volumes only grow", lvm.ErrShrink, lv.VG, lv.Name, lv.Size, size)
		case size == lv.Size:
			resp.Volume = d.toProto(r.dc, lv)
			return nil
		}
		if err := d.checkRoom(mctx, r.dc, size-lv.Size); err != nil {
			return err
		}
		if err := d.extend(mctx, r.dc, r.name, size); err != nil {
			return err
		}
		resp.Volume = d.toProto(r.dc, d.store.current().report.LV(r.dc.VolumeGroup, r.name))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *lvService) ChangeLV(ctx context.Context, req *pb.ChangeLVRequest) (*pb.ChangeLVResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), slices.Concat(req.GetAddTags(), req.GetDelTags()))
	if err != nil {
		return nil, err
	}
	for _, t := range req.GetDelTags() {
		if t == managedTag {
			return nil, fmt.Errorf("%w: the %q tag cannot be removed", lvm.ErrInvalid, managedTag)
		}
		if slices.Contains(req.GetAddTags(), t) {
			return nil, fmt.Errorf("%w: tag %q both added and removed", lvm.ErrInvalid, t)
		}
	}
	resp := &pb.ChangeLVResponse{}
	err = d.withLV(ctx, r, func(mctx context.Context, lv *lvm.LV) error {
		if lv == nil {
			return r.notFound()
		}
		// Permission first: a base is sealed while its device still exists.
		if req.ReadOnly != nil && req.GetReadOnly() != lv.ReadOnly() {
			if err := d.lvm.SetPermission(mctx, r.dc.VolumeGroup, r.name, req.GetReadOnly()); err != nil {
				return err
			}
			d.store.amend(func(rep *lvm.Report) { setAttr(rep.LV(r.dc.VolumeGroup, r.name), 1, req.GetReadOnly(), 'r', 'w') })
		}
		// Only the tags that change: lvm would warn of the others, and none
		// changing starts no process.
		var add, del []string
		for _, t := range req.GetAddTags() {
			if !lv.HasTag(t) && !slices.Contains(add, t) {
				add = append(add, t)
			}
		}
		for _, t := range req.GetDelTags() {
			if lv.HasTag(t) && !slices.Contains(del, t) {
				del = append(del, t)
			}
		}
		if len(add) > 0 || len(del) > 0 {
			if err := d.lvm.ChangeTags(mctx, r.dc.VolumeGroup, r.name, add, del); err != nil {
				return err
			}
			d.store.amend(func(rep *lvm.Report) {
				if lv := rep.LV(r.dc.VolumeGroup, r.name); lv != nil {
					lv.Tags = append(slices.DeleteFunc(lv.Tags, func(t string) bool { return slices.Contains(del, t) }), add...)
				}
				useMetadata(rep, r.dc.VolumeGroup, tagsMetadataBytes(add))
			})
		}
		if req.Active != nil && req.GetActive() != lv.Active() {
			if err := d.lvm.SetActive(mctx, r.dc.VolumeGroup, r.name, req.GetActive()); err != nil {
				return err
			}
			d.store.amend(func(rep *lvm.Report) { setAttr(rep.LV(r.dc.VolumeGroup, r.name), 4, req.GetActive(), 'a', '-') })
		}
		resp.Volume = d.toProto(r.dc, d.store.current().report.LV(r.dc.VolumeGroup, r.name))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// setAttr sets character i of an LV's lv_attr to yes or no.
func setAttr(lv *lvm.LV, i int, on bool, yes, no byte) {
	if lv == nil || len(lv.Attr) <= i {
		return
	}
	b := []byte(lv.Attr)
	b[i] = no
	if on {
		b[i] = yes
	}
	lv.Attr = string(b)
}

func (s *lvService) AdoptLV(ctx context.Context, req *pb.AdoptLVRequest) (*pb.AdoptLVResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), req.GetTags())
	if err != nil {
		return nil, err
	}
	want := withTags(req.GetTags())
	resp := &pb.AdoptLVResponse{}
	err = d.mutate(ctx, func(mctx context.Context) error {
		rep := d.store.current().report
		lv := rep.LV(r.dc.VolumeGroup, r.name)
		if lv == nil {
			// Made since the last report, perhaps: look once more.
			if err := d.store.refreshLocked(mctx); err != nil {
				return err
			}
			if lv = d.store.current().report.LV(r.dc.VolumeGroup, r.name); lv == nil {
				return fmt.Errorf("%w: no lv %s/%s to adopt", lvm.ErrNotFound, r.dc.VolumeGroup, r.name)
			}
		}
		if why := notAdoptable(r.dc, lv); why != "" {
			return fmt.Errorf("%w: lv %s/%s cannot join device class %s: %s", lvm.ErrNotManaged, lv.VG, lv.Name, r.dc.Name, why)
		}
		var add []string
		for _, t := range want {
			if !lv.HasTag(t) {
				add = append(add, t)
			}
		}
		if lv.HasTag(managedTag) && len(add) > 0 {
			return fmt.Errorf("%w: lv %s/%s is thinlvm's already, with tags %v", lvm.ErrConflict, lv.VG, lv.Name, lv.Tags)
		}
		if len(add) > 0 {
			if err := checkMetadataRoom(r.dc, d.store.current().report, tagsMetadataBytes(add), false); err != nil {
				return err
			}
			if err := d.lvm.ChangeTags(mctx, r.dc.VolumeGroup, r.name, add, nil); err != nil {
				return err
			}
			d.store.amend(func(rep *lvm.Report) {
				if lv := rep.LV(r.dc.VolumeGroup, r.name); lv != nil {
					lv.Tags = append(lv.Tags, add...)
				}
				useMetadata(rep, r.dc.VolumeGroup, tagsMetadataBytes(add))
			})
			d.log.Info("lv adopted", "deviceClass", r.dc.Name, "lv", r.dc.VolumeGroup+"/"+r.name, "tags", add)
		}
		resp.Volume = d.toProto(r.dc, d.store.current().report.LV(r.dc.VolumeGroup, r.name))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// notAdoptable says why lv cannot become one of dc's volumes; "" when it
// can: a thin LV of the class's pool, or a plain linear LV of a thick
// class's VG.
func notAdoptable(dc *config.DeviceClass, lv *lvm.LV) string {
	switch {
	case dc.IsThick() && !lv.IsLinear():
		return fmt.Sprintf("not a plain linear LV (lv_attr %s)", lv.Attr)
	case dc.IsThick():
		return ""
	case !lv.IsThin():
		return fmt.Sprintf("not a thin LV (lv_attr %s)", lv.Attr)
	case lv.Pool != dc.ThinPool:
		return fmt.Sprintf("in thin pool %q, not the class's %q", lv.Pool, dc.ThinPool)
	}
	return ""
}

func (s *lvService) RemoveLV(ctx context.Context, req *pb.RemoveLVRequest) (*pb.RemoveLVResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), nil)
	if err != nil {
		return nil, err
	}
	err = d.withLV(ctx, r, func(mctx context.Context, lv *lvm.LV) error {
		if lv == nil {
			return nil // absent: done
		}
		return d.remove(mctx, r.dc, r.name)
	})
	if err != nil {
		return nil, err
	}
	return &pb.RemoveLVResponse{}, nil
}

func (s *lvService) GetLV(_ context.Context, req *pb.GetLVRequest) (*pb.GetLVResponse, error) {
	d := s.d
	r, err := d.validate(req.GetName(), req.GetDeviceClass(), nil)
	if err != nil {
		return nil, err
	}
	lv, err := lookup(d.store.current().report, r)
	if lv == nil || err != nil {
		return nil, fmt.Errorf("%w: lv %s/%s in device class %s", lvm.ErrNotFound, r.dc.VolumeGroup, r.name, r.dc.Name)
	}
	return &pb.GetLVResponse{Volume: d.toProto(r.dc, lv)}, nil
}

func (s *lvService) ListLVs(_ context.Context, req *pb.ListLVsRequest) (*pb.ListLVsResponse, error) {
	d := s.d
	classes := d.cfg.DeviceClasses
	if req.GetDeviceClass() != "" {
		dc, err := d.class(req.GetDeviceClass())
		if err != nil {
			return nil, err
		}
		classes = []config.DeviceClass{*dc}
	}
	if t := req.GetTag(); t != "" {
		if err := lvmname.ValidateTag(t); err != nil {
			return nil, err
		}
	}
	rep := d.store.current().report
	resp := &pb.ListLVsResponse{}
	for i := range classes {
		dc := &classes[i]
		for j := range rep.LVs {
			lv := &rep.LVs[j]
			if lv.VG != dc.VolumeGroup || lv.Pool != dc.ThinPool || !lv.HasTag(managedTag) {
				continue
			}
			if req.GetTag() != "" && !lv.HasTag(req.GetTag()) {
				continue
			}
			resp.Volumes = append(resp.Volumes, d.toProto(dc, lv))
		}
	}
	return resp, nil
}
