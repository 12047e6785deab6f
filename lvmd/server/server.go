package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// Options are the process settings of a Daemon.
type Options struct {
	// CommandTimeout bounds how long lvmd waits for a mutation's commands,
	// and for a background refresh (the lock, the report and the pool
	// autoextend it may run). It never kills a command (lvm.Runner): one
	// that outlasts it runs on and keeps the lock until it ends, and the
	// report is re-read then. A mutation does not stop waiting when its
	// caller goes away, so that none is left half-done.
	CommandTimeout time.Duration
	// RefreshInterval refreshes the report when no mutation did, since thin
	// pool data use changes as volumes are written.
	RefreshInterval time.Duration
	// DevDir is where lvm makes the LVs' device nodes: /dev, unless lvm
	// runs with DM_DEV_DIR set. Device paths are DevDir/<vg>/<lv>.
	DevDir string
}

// Daemon is lvmd: the device classes, the cached report and the services.
type Daemon struct {
	cfg     *config.Config
	lvm     *lvm.Client
	store   *store
	metrics *Metrics
	opts    Options
	log     logr.Logger
	// extendFailed is the VG free space at a device class's last failed
	// autoextend: it is not retried until that changes. Guarded by the
	// store's lock.
	extendFailed map[string]uint64
	// whenFullFailed is the pool and setting of a device class's last
	// failed lvchange --errorwhenfull: not retried for the same pool and
	// setting. Guarded by the store's lock.
	whenFullFailed map[string]string
	// stopping is the Start context's Done: long-lived streams (Watch) end
	// with it, so that the gRPC server's graceful stop need not wait for
	// every watcher to hang up.
	stopping <-chan struct{}
}

// New creates a Daemon. Call Start before serving.
func New(cfg *config.Config, runner lvm.Runner, metrics *Metrics, opts Options, log logr.Logger) *Daemon {
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = 2 * time.Minute
	}
	if opts.DevDir == "" {
		opts.DevDir = "/dev"
	}
	var vgs []string
	seen := map[string]bool{}
	for _, dc := range cfg.DeviceClasses {
		if !seen[dc.VolumeGroup] {
			seen[dc.VolumeGroup] = true
			vgs = append(vgs, dc.VolumeGroup)
		}
	}
	d := &Daemon{cfg: cfg, metrics: metrics, opts: opts, log: log, extendFailed: map[string]uint64{}, whenFullFailed: map[string]string{}}
	d.store = newStore(runner, vgs, opts.CommandTimeout, log)
	d.lvm = d.store.lvm // every command goes through the store's lock and tracker
	if opts.RefreshInterval > 0 {
		d.store.interval = opts.RefreshInterval
	}
	d.store.onPublish = d.observe
	d.store.afterRefresh = d.maintain
	return d
}

// Drain waits until no lvm command runs, those lvmd stopped waiting for
// included, and keeps any other from starting: lvmd calls it on its way
// out, so that it never leaves an lvm command to die with it. It returns
// early with an error when ctx ends.
func (d *Daemon) Drain(ctx context.Context) error {
	_, err := d.store.lock(ctx) // held for good: nothing starts after it
	return err
}

// Start reads the first report (so that lvmd never serves without one and
// fails fast on a missing VG or pool) and refreshes it in the background
// until ctx ends.
func (d *Daemon) Start(ctx context.Context) error {
	// Bounded like every refresh: a hung lvm fails Start rather than hang it.
	rctx, cancel := context.WithTimeout(ctx, d.opts.CommandTimeout)
	defer cancel()
	if err := d.store.refresh(rctx); err != nil {
		return fmt.Errorf("read initial lvm report: %w", err)
	}
	for i := range d.cfg.DeviceClasses {
		if c := capacity(&d.cfg.DeviceClasses[i], d.store.current().report); c.Unavailable != "" {
			d.log.Info("device class unavailable: lvmd serves the others and looks for it at every refresh", "deviceClass", c.DeviceClass, "reason", c.Unavailable)
		}
	}
	d.stopping = ctx.Done()
	go d.store.run(ctx)
	return nil
}

// Register adds LVService and VGService to s.
func (d *Daemon) Register(s *grpc.Server) {
	pb.RegisterLVServiceServer(s, &lvService{d: d})
	pb.RegisterVGServiceServer(s, &vgService{d: d})
}

// mutate runs f under the lock. The wait for the lock ends with the
// caller's ctx: a caller that went away gets an error wrapping the context's
// and runs no command. f gets a mutation context (mutationContext) and a
// view re-read when stale.
func (d *Daemon) mutate(ctx context.Context, f func(mctx context.Context) error) error {
	unlock, err := d.store.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	mctx, cancel := d.mutationContext(ctx)
	defer cancel()
	if err := d.store.freshenLocked(mctx); err != nil {
		return err
	}
	return f(mctx)
}

// mutationContext detaches a mutation from its caller's cancellation, so
// that one of several commands (a snapshot, then its extend) is not left
// half-done when the caller goes away, and bounds how long lvmd waits for
// it instead. The bound ends the wait, never a command (lvm.Runner).
func (d *Daemon) mutationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.opts.CommandTimeout)
}

// class resolves a request's device class.
func (d *Daemon) class(name string) (*config.DeviceClass, error) {
	dc, ok := d.cfg.Class(name)
	if !ok {
		if name == "" {
			return nil, fmt.Errorf("%w: no device class given and no default device class", lvm.ErrInvalid)
		}
		return nil, fmt.Errorf("%w: unknown device class %q", lvm.ErrInvalid, name)
	}
	return dc, nil
}

// observe updates the gauges from a published view.
func (d *Daemon) observe(v *view) {
	if d.metrics == nil {
		return
	}
	d.metrics.generation.Set(float64(v.generation))
	for i := range d.cfg.DeviceClasses {
		dc := &d.cfg.DeviceClasses[i]
		c := capacity(dc, v.report)
		m := d.metrics
		m.available.WithLabelValues(dc.Name).Set(b2f(c.Unavailable == ""))
		if c.Unavailable != "" {
			m.availableByte.WithLabelValues(dc.Name).Set(0)
			continue // the pool's gauges keep their last values
		}
		m.vgSize.WithLabelValues(dc.Name).Set(float64(c.VgSizeBytes))
		m.vgFree.WithLabelValues(dc.Name).Set(float64(c.VgFreeBytes))
		m.poolSize.WithLabelValues(dc.Name).Set(float64(c.ThinPoolSizeBytes))
		m.poolData.WithLabelValues(dc.Name).Set(c.DataPercent)
		m.poolMeta.WithLabelValues(dc.Name).Set(c.MetadataPercent)
		m.virtualBytes.WithLabelValues(dc.Name).Set(float64(c.VirtualBytes))
		m.availableByte.WithLabelValues(dc.Name).Set(float64(c.AvailableBytes))
		m.lvCount.WithLabelValues(dc.Name).Set(float64(c.LvCount))
		m.overHighWater.WithLabelValues(dc.Name).Set(b2f(c.OverHighWatermark))
		m.vgMetaSize.WithLabelValues(dc.Name).Set(float64(c.VgMetadataSizeBytes))
		m.vgMetaFree.WithLabelValues(dc.Name).Set(float64(c.VgMetadataFreeBytes))
		m.vgMetaLVsLeft.WithLabelValues(dc.Name).Set(float64(c.VgMetadataLvsLeft))
		for _, s := range poolHealthStates {
			m.poolHealth.WithLabelValues(dc.Name, s.label).Set(b2f(string(s.health) == c.PoolHealth))
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// maintain runs after every refresh, with the store's lock held: it grows
// the pools that need it (autoExtend), then sets each pool's errorwhenfull
// as its device class wants (setWhenFull). It reports whether it changed
// anything, so that the store re-reads the report.
func (d *Daemon) maintain(ctx context.Context, r *lvm.Report) bool {
	extended := d.autoExtend(ctx, r)
	changed := d.setWhenFull(ctx, r)
	return extended || changed
}

// autoExtend grows the thin pools at or over their autoextend threshold
// while their VG has room beyond the spare. Called with the store's lock
// held, after a refresh; it reports whether it changed anything.
func (d *Daemon) autoExtend(ctx context.Context, r *lvm.Report) bool {
	changed := false
	for i := range d.cfg.DeviceClasses {
		dc := &d.cfg.DeviceClasses[i]
		if dc.AutoExtend == nil || !d.needsExtend(dc, r) {
			continue
		}
		// An extend is a mutation: lvmd waits for it as long as for any
		// other, whatever its caller's context (Start, the refresher, a
		// create that needs room), and never kills it.
		actx, cancel := context.WithTimeout(ctx, d.opts.CommandTimeout)
		err := d.lvm.AutoExtendPool(actx, dc.VolumeGroup, dc.ThinPool, dc.AutoExtend.ThresholdPercent, dc.AutoExtend.Percent)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			// lvmd stopped waiting (the extend runs on: lvm.StillRunningError)
			// or never started it: no outcome, so no failure to remember. The
			// report read once an extend has ended shows what it did.
			d.log.Error(err, "thin pool autoextend not waited for to its end", "deviceClass", dc.Name)
			continue
		}
		if err != nil {
			d.log.Error(err, "thin pool autoextend failed; retried when the VG's free space changes", "deviceClass", dc.Name)
			d.extendFailed[dc.Name] = r.VG(dc.VolumeGroup).Free
			continue
		}
		d.log.Info("thin pool extended", "deviceClass", dc.Name, "pool", dc.VolumeGroup+"/"+dc.ThinPool)
		changed = true
	}
	return changed
}

func (d *Daemon) needsExtend(dc *config.DeviceClass, r *lvm.Report) bool {
	vg, pool := r.VG(dc.VolumeGroup), r.LV(dc.VolumeGroup, dc.ThinPool)
	if vg == nil || pool == nil || vg.Free <= dc.Spare() {
		return false
	}
	if free, failed := d.extendFailed[dc.Name]; failed && free == vg.Free {
		return false
	}
	t := float64(dc.AutoExtend.ThresholdPercent)
	return pool.DataPercent >= t || pool.MetadataPercent >= t
}

// wantErrorWhenFull tells what a device class wants of its pool's
// errorwhenfull. With autoextend, writes that need space wait while lvmd can
// still grow the pool (the VG has room beyond the spare and the last extend
// did not fail at that free space): lvmd's next refresh, well within
// dm-thin's 60 s no_space_timeout, extends the pool and they complete. Without
// autoextend, or once the VG has no room, nothing will add space in time, and
// a writer is better told at once (a VM pauses on the error and resumes once
// an administrator grows the pool) than left hanging for 60 s.
func (d *Daemon) wantErrorWhenFull(dc *config.DeviceClass, r *lvm.Report) bool {
	if dc.AutoExtend == nil {
		return true
	}
	vg := r.VG(dc.VolumeGroup)
	if vg == nil || vg.Free <= dc.Spare() {
		return true
	}
	if free, failed := d.extendFailed[dc.Name]; failed && free == vg.Free {
		return true
	}
	return false
}

// setWhenFull sets the errorwhenfull of the pools whose device class
// manages it and whose setting differs from what the class wants. Called
// with the store's lock held, after a refresh; it reports whether it changed
// anything.
func (d *Daemon) setWhenFull(ctx context.Context, r *lvm.Report) bool {
	changed := false
	for i := range d.cfg.DeviceClasses {
		dc := &d.cfg.DeviceClasses[i]
		pool := r.LV(dc.VolumeGroup, dc.ThinPool)
		if !dc.ManagesWhenFull() || pool == nil || !pool.IsThinPool() {
			continue
		}
		want := d.wantErrorWhenFull(dc, r)
		if (pool.WhenFull == "error") == want {
			continue
		}
		key := fmt.Sprintf("%s/%t", pool.UUID, want)
		if d.whenFullFailed[dc.Name] == key {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, d.opts.CommandTimeout)
		err := d.lvm.SetErrorWhenFull(actx, dc.VolumeGroup, dc.ThinPool, want)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			d.log.Error(err, "thin pool errorwhenfull change not waited for to its end", "deviceClass", dc.Name)
			continue
		}
		if err != nil {
			d.log.Error(err, "set thin pool errorwhenfull failed; not retried for this pool and setting until lvmd restarts",
				"deviceClass", dc.Name, "errorWhenFull", want)
			d.whenFullFailed[dc.Name] = key
			continue
		}
		d.log.Info("thin pool errorwhenfull set", "deviceClass", dc.Name, "pool", dc.VolumeGroup+"/"+dc.ThinPool,
			"errorWhenFull", want, "was", pool.WhenFull)
		changed = true
	}
	return changed
}
