package server

import (
	"context"
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
	// CommandTimeout bounds every lvm command. Mutations run to the end even
	// when their caller goes away, so that no LV is left half-made.
	CommandTimeout time.Duration
	// RefreshInterval refreshes the report when no mutation did, since thin
	// pool data use changes as volumes are written.
	RefreshInterval time.Duration
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
}

// New creates a Daemon. Call Start before serving.
func New(cfg *config.Config, runner lvm.Runner, metrics *Metrics, opts Options, log logr.Logger) *Daemon {
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = 2 * time.Minute
	}
	client := &lvm.Client{Runner: runner}
	var vgs []string
	seen := map[string]bool{}
	for _, dc := range cfg.DeviceClasses {
		if !seen[dc.VolumeGroup] {
			seen[dc.VolumeGroup] = true
			vgs = append(vgs, dc.VolumeGroup)
		}
	}
	d := &Daemon{cfg: cfg, lvm: client, metrics: metrics, opts: opts, log: log, extendFailed: map[string]uint64{}}
	d.store = newStore(client, vgs, log)
	if opts.RefreshInterval > 0 {
		d.store.interval = opts.RefreshInterval
	}
	d.store.onPublish = d.observe
	d.store.afterRefresh = d.autoExtend
	return d
}

// Start reads the first report (so that lvmd never serves without one and
// fails fast on a missing VG or pool) and refreshes it in the background
// until ctx ends.
func (d *Daemon) Start(ctx context.Context) error {
	if err := d.store.refresh(ctx); err != nil {
		return fmt.Errorf("read initial lvm report: %w", err)
	}
	for i := range d.cfg.DeviceClasses {
		if _, err := capacity(&d.cfg.DeviceClasses[i], d.store.current().report); err != nil {
			return err
		}
	}
	go d.store.run(ctx)
	return nil
}

// Register adds LVService and VGService to s.
func (d *Daemon) Register(s *grpc.Server) {
	pb.RegisterLVServiceServer(s, &lvService{d: d})
	pb.RegisterVGServiceServer(s, &vgService{d: d})
}

// mutationContext detaches a mutation from its caller's cancellation (an lvm
// command killed midway can leave a half-made LV) and bounds it instead.
func (d *Daemon) mutationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.opts.CommandTimeout)
}

// class resolves a request's device class.
func (d *Daemon) class(name string) (*config.DeviceClass, error) {
	dc, ok := d.cfg.Class(name)
	if !ok {
		if name == "" {
			return nil, fmt.Errorf("%w: no device class given and no default device class", errInvalid)
		}
		return nil, fmt.Errorf("%w: unknown device class %q", errInvalid, name)
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
		c, err := capacity(dc, v.report)
		if err != nil {
			continue
		}
		m := d.metrics
		m.vgSize.WithLabelValues(dc.Name).Set(float64(c.VgSizeBytes))
		m.vgFree.WithLabelValues(dc.Name).Set(float64(c.VgFreeBytes))
		m.poolSize.WithLabelValues(dc.Name).Set(float64(c.ThinPoolSizeBytes))
		m.poolData.WithLabelValues(dc.Name).Set(c.DataPercent)
		m.poolMeta.WithLabelValues(dc.Name).Set(c.MetadataPercent)
		m.virtualBytes.WithLabelValues(dc.Name).Set(float64(c.VirtualBytes))
		m.availableByte.WithLabelValues(dc.Name).Set(float64(c.AvailableBytes))
		m.lvCount.WithLabelValues(dc.Name).Set(float64(c.LvCount))
	}
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
		if err := d.lvm.AutoExtendPool(ctx, dc.VolumeGroup, dc.ThinPool, dc.AutoExtend.ThresholdPercent, dc.AutoExtend.Percent); err != nil {
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
