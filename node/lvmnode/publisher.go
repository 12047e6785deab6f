package lvmnode

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd"
)

// Publisher writes the LVMNode of one node from lvmd's capacity reports.
type Publisher struct {
	Client   client.Client
	LVMD     lvmd.Client
	NodeName string
	// Interval is the least time between two writes; default 2s.
	Interval time.Duration
	// DriftInterval is the least time between two writes when only the
	// pools' use changed (DataUsed, DataPercent, MetadataPercent, and
	// Available by at most 1%): volumes being written move
	// those on every lvmd refresh, on every node. A change of anything
	// else (sizes, LVs, health, the high-water mark, the VG's metadata
	// room) is written after Interval. Default 1m.
	DriftInterval time.Duration
	// Retry is the wait before reconnecting a broken Watch; default 2s.
	Retry time.Duration
	// Recorder, when set, records an Event on the LVMNode when a pool goes
	// over or back under its high-water mark, and when it becomes unhealthy
	// or recovers.
	Recorder events.EventRecorder
	// Transfer, when set, is published as the node's transfer endpoint.
	Transfer *thinlvmv1.TransferEndpoint
	// Resync is how often the newest report is compared with the LVMNode
	// again when lvmd sends nothing new (an idle node); default 1m.
	Resync time.Duration
	// Synced, when set, is set to the time (Unix seconds) the LVMNode was
	// last found or made current: at every report and every Resync. An
	// agent that cannot write its LVMNode (or a stuck one) stops moving it
	// (the ThinLVMNodeStatusStale alert).
	Synced prometheus.Gauge

	mu        sync.Mutex
	writes    int
	lastWrite time.Time
}

// NewSyncedGauge makes a Publisher's Synced gauge,
// thinlvm_node_lvmnode_synced_timestamp_seconds, registered with reg.
func NewSyncedGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "thinlvm", Subsystem: "node", Name: "lvmnode_synced_timestamp_seconds",
		Help: "When the agent last found its LVMNode current or made it so (Unix seconds): at every lvmd report, and every minute when idle."})
	reg.MustRegister(g)
	return g
}

var _ manager.Runnable = (*Publisher)(nil)
var _ manager.LeaderElectionRunnable = (*Publisher)(nil)

// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=thinlvm.io,resources=lvmnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// NeedLeaderElection is false: every node agent publishes its own node.
func (p *Publisher) NeedLeaderElection() bool { return false }

// Writes returns how many status writes the publisher made.
func (p *Publisher) Writes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Start follows lvmd's Watch until ctx ends, reconnecting when it breaks.
func (p *Publisher) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("node", p.NodeName)
	latest := make(chan *pb.GetCapacityResponse, 1)
	go p.follow(ctx, latest)

	var pending, last *pb.GetCapacityResponse
	var timer <-chan time.Time
	resync := time.NewTicker(orDefault(p.Resync, time.Minute))
	defer resync.Stop()
	// held: the timer waits out DriftInterval for a report that changes
	// only the pools' use; a newer report is looked at at once.
	held := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case pending = <-latest:
			last = pending
			if held {
				timer, held = nil, false
			}
		case <-resync.C:
			if pending == nil {
				pending = last
			}
		case <-timer:
			timer, held = nil, false
		}
		if pending == nil || timer != nil {
			continue
		}
		if wait := orDefault(p.Interval, 2*time.Second) - time.Since(p.lastWritten()); wait > 0 {
			timer = time.After(wait) // rate limit: the newest report is written when it fires
			continue
		}
		wait, err := p.publish(ctx, pending)
		if err != nil {
			logger.Error(err, "publish LVMNode failed; retrying")
			timer = time.After(orDefault(p.Retry, 2*time.Second))
			continue
		}
		if p.Synced != nil {
			p.Synced.SetToCurrentTime()
		}
		if wait > 0 {
			timer, held = time.After(wait), true
			continue
		}
		pending = nil
	}
}

func (p *Publisher) lastWritten() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastWrite
}

// follow streams lvmd's reports into latest, keeping only the newest.
func (p *Publisher) follow(ctx context.Context, latest chan *pb.GetCapacityResponse) {
	logger := log.FromContext(ctx).WithValues("node", p.NodeName)
	for ctx.Err() == nil {
		stream, err := p.LVMD.Watch(ctx, &pb.WatchRequest{})
		for err == nil {
			var resp *pb.GetCapacityResponse
			if resp, err = stream.Recv(); err == nil {
				select {
				case <-latest: // drop the older report
				default:
				}
				latest <- resp
			}
		}
		if ctx.Err() != nil {
			return
		}
		logger.Info("lvmd watch broke; reconnecting", "error", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(orDefault(p.Retry, 2*time.Second)):
		}
	}
}

// publish writes resp into the LVMNode, creating it (owned by the Node)
// first when missing. It writes nothing when the status would not change,
// and, when only the pools' use would, nothing before DriftInterval since
// the last write: it returns how long is left then.
func (p *Publisher) publish(ctx context.Context, resp *pb.GetCapacityResponse) (time.Duration, error) {
	ln := &thinlvmv1.LVMNode{}
	err := p.Client.Get(ctx, types.NamespacedName{Name: p.NodeName}, ln)
	if apierrors.IsNotFound(err) {
		ln, err = p.create(ctx)
	}
	if err != nil {
		return 0, err
	}
	classes := DeviceClasses(resp)
	if equality.Semantic.DeepEqual(ln.Status.Transfer, p.Transfer) {
		if equality.Semantic.DeepEqual(ln.Status.DeviceClasses, classes) && meta.FindStatusCondition(ln.Status.Conditions, thinlvmv1.ConditionReady) != nil {
			return 0, nil
		}
		if onlyUse(ln.Status.DeviceClasses, classes) {
			if wait := orDefault(p.DriftInterval, time.Minute) - time.Since(p.lastWritten()); wait > 0 {
				return wait, nil
			}
		}
	}
	before := ln.DeepCopy()
	patch := client.MergeFrom(before)
	ln.Status.DeviceClasses = classes
	ln.Status.Transfer = p.Transfer
	meta.SetStatusCondition(&ln.Status.Conditions, readyCondition(classes, ln.Generation))
	now := metav1.Now()
	ln.Status.UpdateTime = &now
	if err := p.Client.Status().Patch(ctx, ln, patch); err != nil {
		return 0, fmt.Errorf("update LVMNode %s status: %w", p.NodeName, err)
	}
	p.mu.Lock()
	p.writes++
	p.lastWrite = time.Now()
	p.mu.Unlock()
	p.recordChanges(ln, before.Status.DeviceClasses, classes)
	log.FromContext(ctx).V(2).Info("LVMNode status written", "node", klog.KRef("", p.NodeName), "generation", resp.GetGeneration())
	return 0, nil
}

// onlyUse reports whether the device classes before and now differ only in
// the pools' data and metadata use, and in what is available by at most 1%
// of what before says.
func onlyUse(before, now []thinlvmv1.DeviceClassStatus) bool {
	if len(before) != len(now) {
		return false
	}
	for i := range now {
		a, b := before[i], now[i]
		a.DataUsed, a.DataPercent, a.MetadataPercent = b.DataUsed, b.DataPercent, b.MetadataPercent
		// What is available follows the data use once the pool's written
		// space, not the ratio, bounds it: a move within 1% of what was
		// published is use too.
		if d := a.Available.Value() - b.Available.Value(); d*100 <= a.Available.Value() && -d*100 <= a.Available.Value() {
			a.Available = b.Available
		}
		if !equality.Semantic.DeepEqual(a, b) {
			return false
		}
	}
	return true
}

func (p *Publisher) create(ctx context.Context) (*thinlvmv1.LVMNode, error) {
	node := &corev1.Node{}
	if err := p.Client.Get(ctx, types.NamespacedName{Name: p.NodeName}, node); err != nil {
		return nil, fmt.Errorf("get Node %s (the LVMNode's owner): %w", p.NodeName, err)
	}
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{
		Name: p.NodeName,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		}},
	}}
	if err := p.Client.Create(ctx, ln); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return ln, p.Client.Get(ctx, types.NamespacedName{Name: p.NodeName}, ln)
		}
		return nil, fmt.Errorf("create LVMNode %s: %w", p.NodeName, err)
	}
	return ln, nil
}

// recordChanges records an Event for each device class whose pool crossed
// its high-water mark or changed health between the written status before
// and the one now. The status is the memory: an agent that restarts records
// nothing for a state it already published.
func (p *Publisher) recordChanges(ln *thinlvmv1.LVMNode, before, now []thinlvmv1.DeviceClassStatus) {
	if p.Recorder == nil {
		return
	}
	old := map[string]thinlvmv1.DeviceClassStatus{}
	for _, c := range before {
		old[c.Name] = c
	}
	for _, c := range now {
		o, known := old[c.Name]
		pool := c.VolumeGroup + "/" + c.ThinPool
		found := "thin pool " + pool
		if c.Type == thinlvmv1.DeviceClassThick {
			found = "volume group " + c.VolumeGroup
		}
		switch {
		case c.Unavailable != "" && c.Unavailable != o.Unavailable:
			p.Recorder.Eventf(ln, nil, corev1.EventTypeWarning, thinlvmv1.ReasonDeviceClassUnavailable, "CheckCapacity",
				"device class %s: %s on this node: it serves no volumes until the volume group and thin pool are made (lvmd looks again at every refresh)", c.Name, c.Unavailable)
		case c.Unavailable == "" && known && o.Unavailable != "":
			p.Recorder.Eventf(ln, nil, corev1.EventTypeNormal, thinlvmv1.ReasonDeviceClassAvailable, "CheckCapacity",
				"device class %s: %s found: it serves volumes", c.Name, found)
		}
		if c.Unavailable != "" {
			continue // no pool to tell of
		}
		switch {
		case c.OverHighWatermark && !o.OverHighWatermark:
			p.Recorder.Eventf(ln, nil, corev1.EventTypeWarning, thinlvmv1.ReasonThinPoolOverHighWatermark, "CheckCapacity",
				"device class %s: thin pool %s is over its high-water mark (data %s%%, metadata %s%%): new volumes are refused; grow the pool or free space",
				c.Name, pool, c.DataPercent, c.MetadataPercent)
		case !c.OverHighWatermark && o.OverHighWatermark:
			p.Recorder.Eventf(ln, nil, corev1.EventTypeNormal, thinlvmv1.ReasonThinPoolUnderHighWatermark, "CheckCapacity",
				"device class %s: thin pool %s is under its high-water mark again (data %s%%, metadata %s%%)", c.Name, pool, c.DataPercent, c.MetadataPercent)
		}
		switch full, wasFull := metadataFull(c), metadataFull(o); {
		case full && !wasFull:
			p.Recorder.Eventf(ln, nil, corev1.EventTypeWarning, thinlvmv1.ReasonVGMetadataFull, "CheckCapacity",
				"device class %s: volume group %s's metadata area is full (%s of %s free; %d LVs in the class): new volumes are refused; remove volumes, or move the VG to PVs with a larger metadata area (pvcreate --metadatasize)",
				c.Name, c.VolumeGroup, c.VGMetadata.Free.String(), c.VGMetadata.Size.String(), c.LVCount)
		case !full && wasFull && c.VGMetadata != nil:
			p.Recorder.Eventf(ln, nil, corev1.EventTypeNormal, thinlvmv1.ReasonVGMetadataRoom, "CheckCapacity",
				"device class %s: volume group %s's metadata area has room for %d more volumes", c.Name, c.VolumeGroup, c.VGMetadata.LVsLeft)
		}
		switch {
		case c.PoolHealth != "" && c.PoolHealth != o.PoolHealth:
			p.Recorder.Eventf(ln, nil, corev1.EventTypeWarning, thinlvmv1.ReasonThinPoolUnhealthy, "CheckCapacity",
				"device class %s: thin pool %s is %s (data %s%%, metadata %s%%): writes that need new space fail", c.Name, pool, c.PoolHealth, c.DataPercent, c.MetadataPercent)
		case c.PoolHealth == "" && o.PoolHealth != "":
			p.Recorder.Eventf(ln, nil, corev1.EventTypeNormal, thinlvmv1.ReasonThinPoolRecovered, "CheckCapacity",
				"device class %s: thin pool %s takes writes again (was %s)", c.Name, pool, o.PoolHealth)
		}
	}
}

// readyCondition is the LVMNode's Ready condition for its device classes:
// False while one is unavailable, naming each such class and why.
func readyCondition(classes []thinlvmv1.DeviceClassStatus, generation int64) metav1.Condition {
	if why := Unavailable(classes); why != "" {
		return metav1.Condition{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionFalse, Reason: thinlvmv1.ReasonDeviceClassUnavailable, ObservedGeneration: generation,
			Message: why + " (lvmd looks again at every refresh: make the volume group and thin pool, or remove the class from this node's lvmd configuration)"}
	}
	return metav1.Condition{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionTrue, Reason: thinlvmv1.ReasonDeviceClassesReady, ObservedGeneration: generation,
		Message: fmt.Sprintf("%d device classes serve volumes", len(classes))}
}

// Unavailable names each device class that serves no volumes on its node,
// and why ("device class nvme: volume group vgnvme not found; ..."); ""
// when every one serves. The LVMNode's Ready condition and the agent's
// readiness check say it alike.
func Unavailable(classes []thinlvmv1.DeviceClassStatus) string {
	var why []string
	for _, c := range classes {
		if c.Unavailable != "" {
			why = append(why, fmt.Sprintf("device class %s: %s", c.Name, c.Unavailable))
		}
	}
	return strings.Join(why, "; ")
}

// metadataFull tells whether a class's VG metadata area takes no more
// volumes.
func metadataFull(c thinlvmv1.DeviceClassStatus) bool {
	return c.VGMetadata != nil && c.VGMetadata.LVsLeft == 0
}

// DeviceClasses converts lvmd's capacity report into LVMNode status.
func DeviceClasses(resp *pb.GetCapacityResponse) []thinlvmv1.DeviceClassStatus {
	q := func(b uint64) resource.Quantity { return *resource.NewQuantity(int64(b), resource.BinarySI) }
	out := make([]thinlvmv1.DeviceClassStatus, 0, len(resp.GetDeviceClasses()))
	for _, c := range resp.GetDeviceClasses() {
		out = append(out, thinlvmv1.DeviceClassStatus{
			Name: c.GetDeviceClass(), Type: classType(c), VolumeGroup: c.GetVolumeGroup(), ThinPool: c.GetThinPool(), Default: c.GetDefault(),
			VGSize: q(c.GetVgSizeBytes()), VGFree: q(c.GetVgFreeBytes()), PoolSize: q(c.GetThinPoolSizeBytes()),
			DataUsed: q(c.GetDataUsedBytes()), Virtual: q(c.GetVirtualBytes()), Available: q(c.GetAvailableBytes()),
			DataPercent:        strconv.FormatFloat(c.GetDataPercent(), 'f', 2, 64),
			MetadataPercent:    strconv.FormatFloat(c.GetMetadataPercent(), 'f', 2, 64),
			OverprovisionRatio: strconv.FormatFloat(c.GetOverprovisionRatio(), 'g', -1, 64),
			LVCount:            int32(c.GetLvCount()),
			OverHighWatermark:  c.GetOverHighWatermark(),
			PoolHealth:         thinlvmv1.ThinPoolHealth(c.GetPoolHealth()),
			VGMetadata:         vgMetadata(c),
			Unavailable:        c.GetUnavailable(),
		})
	}
	return out
}

// classType is the status's type of a class: "thick", or empty for a thin
// class (and from an lvmd older than the types).
func classType(c *pb.DeviceClassCapacity) thinlvmv1.DeviceClassType {
	if c.GetType() == string(thinlvmv1.DeviceClassThick) {
		return thinlvmv1.DeviceClassThick
	}
	return ""
}

// vgMetadata is the VG metadata area of a device class, or nil when lvmd
// did not report it (an older lvmd).
func vgMetadata(c *pb.DeviceClassCapacity) *thinlvmv1.VGMetadataStatus {
	if c.GetVgMetadataSizeBytes() == 0 {
		return nil
	}
	return &thinlvmv1.VGMetadataStatus{
		Size:    *resource.NewQuantity(int64(c.GetVgMetadataSizeBytes()), resource.BinarySI),
		Free:    *resource.NewQuantity(int64(c.GetVgMetadataFreeBytes()), resource.BinarySI),
		LVsLeft: int32(min(c.GetVgMetadataLvsLeft(), math.MaxInt32)),
	}
}
