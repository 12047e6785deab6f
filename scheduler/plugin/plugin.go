package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/thinlvm/thinlvm/api/sizes"
	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
	"github.com/thinlvm/thinlvm/scheduler/apis/config/validation"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "ThinLVM"

// GoldenImageParameter is the StorageClass parameter that names the golden
// image every volume of the class is made from.
const GoldenImageParameter = thinlvmv1.GoldenImageParameter

const stateKey fwk.StateKey = Name + "/demand"

// GroupVersionResources the plugin reads through dynamic informers.
var (
	lvmNodesGVR        = thinlvmv1.GroupVersion.WithResource("lvmnodes")
	logicalVolumesGVR  = thinlvmv1.GroupVersion.WithResource("logicalvolumes")
	goldenImagesGVR    = thinlvmv1.GroupVersion.WithResource("goldenimages")
	channelsGVR        = thinlvmv1.GroupVersion.WithResource("goldenimagechannels")
	volumeSnapshotGVR  = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	snapshotContentGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// Plugin is the ThinLVM scheduler plugin.
type Plugin struct {
	args   *config.ThinLVMArgs
	lister Lister
	ledger *ledger

	// held are pods turned away only by reservations in flight: no cluster
	// event marks the moment those settle, so they are moved back to the
	// active queue every second (activate) instead of waiting for one.
	heldMu sync.Mutex
	held   map[string]*corev1.Pod
}

// Lister is what the plugin reads of the cluster; tests give a fake.
type Lister interface {
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, error)
	PV(name string) (*corev1.PersistentVolume, error)
	StorageClass(name string) (*storagev1.StorageClass, error)
	// Node is a node's LVMNode and what Filter and Score read of it
	// (NewNodeState).
	Node(name string) (*NodeState, error)
	// BaseHolders is how many nodes hold image's base (BaseState Held),
	// and how many nodes have an LVMNode.
	BaseHolders(image *thinlvmv1.GoldenImage) (holders, nodes int)
	LogicalVolume(name string) (*thinlvmv1.LogicalVolume, error)
	GoldenImage(name string) (*thinlvmv1.GoldenImage, error)
	GoldenImageChannel(name string) (*thinlvmv1.GoldenImageChannel, error)
	// SnapshotVolume is the CSI snapshot ID of a bound VolumeSnapshot.
	SnapshotHandle(ctx context.Context, namespace, name string) (string, error)
}

// New is the plugin's factory: it asserts the args' type, validates them
// (invalid args stop the scheduler with a field-path error) and starts the
// informers it reads.
func New(ctx context.Context, obj runtime.Object, h handle) (fwPlugin, error) {
	args, ok := obj.(*config.ThinLVMArgs)
	if !ok {
		return nil, fmt.Errorf("%s: args are %T, want *config.ThinLVMArgs", Name, obj)
	}
	if err := validation.ValidateThinLVMArgs(nil, args); err != nil {
		return nil, fmt.Errorf("%s: invalid args: %w", Name, err)
	}
	dyn, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, err
	}
	l := &clusterLister{
		pvcs: h.SharedInformerFactory().Core().V1().PersistentVolumeClaims().Lister(),
		pvs:  h.SharedInformerFactory().Core().V1().PersistentVolumes().Lister(),
		scs:  h.SharedInformerFactory().Storage().V1().StorageClasses().Lister(),
		dyn:  dyn,
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	// Objects are converted to their types once, as they arrive: Filter and
	// Score read them for every node of every cycle.
	lvmNodes := factory.ForResource(lvmNodesGVR).Informer()
	if err := lvmNodes.SetTransform(typed[thinlvmv1.LVMNode]); err != nil {
		return nil, err
	}
	l.nodes = newNodeIndex()
	indexed, err := lvmNodes.AddEventHandler(l.nodes.handler())
	if err != nil {
		return nil, err
	}
	lvs := factory.ForResource(logicalVolumesGVR).Informer()
	if err := lvs.SetTransform(typed[thinlvmv1.LogicalVolume]); err != nil {
		return nil, err
	}
	images := factory.ForResource(goldenImagesGVR).Informer()
	if err := images.SetTransform(typed[thinlvmv1.GoldenImage]); err != nil {
		return nil, err
	}
	channels := factory.ForResource(channelsGVR).Informer()
	if err := channels.SetTransform(typed[thinlvmv1.GoldenImageChannel]); err != nil {
		return nil, err
	}
	l.lvs, l.images, l.channels = lvs.GetIndexer(), images.GetIndexer(), channels.GetIndexer()
	factory.Start(ctx.Done())
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("%s: cache of %s did not sync", Name, gvr.Resource)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), indexed.HasSynced) {
		return nil, fmt.Errorf("%s: the LVMNodes were not indexed", Name)
	}
	p := NewWithLister(args, l)
	p.ledger.count = func(n int) { reservationsGauge.Set(float64(n)) }
	go p.reactivate(ctx, func(pods map[string]*corev1.Pod) { h.Activate(klog.FromContext(ctx), pods) }, time.Second)
	return p, nil
}

// NewWithLister makes the plugin over a lister (tests use a fake).
func NewWithLister(args *config.ThinLVMArgs, l Lister) *Plugin {
	return &Plugin{args: args, lister: l, ledger: newLedger(args.ReservationTTL.Duration), held: map[string]*corev1.Pod{}}
}

// reactivate moves the held pods back to the active queue every period,
// and sweeps the ledger: with no pod to schedule, PreFilter would not, and
// settled reservations would linger in the gauge.
func (p *Plugin) reactivate(ctx context.Context, activate func(map[string]*corev1.Pod), period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.sweep()
		p.heldMu.Lock()
		pods := p.held
		p.held = map[string]*corev1.Pod{}
		p.heldMu.Unlock()
		if len(pods) > 0 {
			activate(pods)
		}
	}
}

func (p *Plugin) hold(pod *corev1.Pod) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	p.held[pod.Namespace+"/"+pod.Name] = pod
}

// Name implements the framework's Plugin.
func (p *Plugin) Name() string { return Name }

// demand is what a pod's unbound thinlvm claims need; it lives in the
// cycle state between PreFilter and Reserve.
type demand struct {
	// bytes by device class ("" is a node's default class).
	bytes map[string]int64
	// classes are bytes and the new volumes' count (each takes room in its
	// VG's metadata area) by device class, in the order of the classes'
	// names: Filter and Score read them for every node.
	classes []classDemand
	// images are the golden images the volumes are made from, each once.
	// Only an image that exists counts: a base is known by its
	// GoldenImage's UID, and no node holds one of an image not made.
	images []*thinlvmv1.GoldenImage
	// holders count the nodes that hold each image's base (by name), nodes
	// all nodes with an LVMNode (the lister keeps both counted).
	holders map[string]int
	nodes   int
	// sourceNode holds a clone's or restore's source: there the volume is
	// an O(1) thin snapshot; elsewhere its data is copied from there.
	// sourceBase is the golden image the source descends from: a node
	// holding its base receives only what differs from it.
	sourceNode string
	sourceBase *thinlvmv1.GoldenImage
	claims     []string
}

// classDemand is what a pod needs of one device class ("" for a node's
// default).
type classDemand struct {
	class string
	bytes int64
	lvs   int
}

// Clone implements fwk.StateData; a demand is never changed after PreFilter.
func (d *demand) Clone() fwk.StateData { return d }

// PreFilter computes the pod's demand once per cycle and skips pods that
// need no thinlvm volume.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*preFilterResult, *fwk.Status) {
	d, err := p.demandOf(ctx, pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if len(d.bytes) == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	for class, need := range d.bytes {
		if sizes.Saturated(need) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("the pod's thinlvm claims of device class %q add up to more bytes than any node can hold", class))
		}
	}
	p.sweep()
	state.Write(stateKey, d)
	if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
		images := make([]string, 0, len(d.images))
		for _, gi := range d.images {
			images = append(images, gi.Name)
		}
		logger.Info("thinlvm demand", "pod", klog.KObj(pod), "bytes", d.bytes, "goldenImages", images, "sourceNode", d.sourceNode)
	}
	return nil, nil
}

// sweep drops the reservations that have expired or that their nodes now
// report.
func (p *Plugin) sweep() {
	p.ledger.sweep(func(r reservation) bool {
		n, err := p.lister.Node(r.node)
		return err == nil && p.settled(r, n.LVMNode)
	})
}

// PreFilterExtensions implements the framework's PreFilterPlugin.
func (p *Plugin) PreFilterExtensions() preFilterExtensions { return nil }

func (p *Plugin) demandOf(ctx context.Context, pod *corev1.Pod) (*demand, error) {
	d := &demand{bytes: map[string]int64{}, holders: map[string]int{}}
	lvs := map[string]int{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := p.lister.PVC(pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		if apierrors.IsNotFound(err) {
			continue // VolumeBinding reports the missing claim
		}
		if err != nil {
			return nil, err
		}
		if pvc.Spec.VolumeName != "" || pvc.Spec.StorageClassName == nil {
			continue // bound already: its volume is made
		}
		sc, err := p.lister.StorageClass(*pvc.Spec.StorageClassName)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if sc.Provisioner != thinlvmv1.DriverName || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			continue
		}
		class := sc.Parameters[thinlvmv1.DeviceClassParameter]
		copied := pvc.Spec.DataSource != nil && thinlvmv1.ImageDataSource(pvc) == nil
		gi, err := p.goldenImageOf(pvc, sc)
		if err != nil {
			return nil, err
		}
		if gi != nil {
			if class == "" {
				class = gi.Spec.DeviceClass // the controller makes the volume in its image's class
			}
			// A clone or restore in a golden class is a snapshot of its
			// source (in the image's class): the source's node decides,
			// not the image's bases.
			if !copied && !slices.ContainsFunc(d.images, func(o *thinlvmv1.GoldenImage) bool { return o.Name == gi.Name }) {
				d.images = append(d.images, gi)
			}
		}
		size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		d.bytes[class] = sizes.Add(d.bytes[class], size.Value())
		lvs[class]++
		d.claims = append(d.claims, pvc.Namespace+"/"+pvc.Name)
		if src := pvc.Spec.DataSource; copied {
			// Sources on several nodes: the first one's node is preferred,
			// the others' data is copied wherever the pod goes.
			if d.sourceNode == "" {
				d.sourceNode, d.sourceBase = p.sourceNode(ctx, pvc.Namespace, src)
			}
		}
	}
	for _, gi := range d.images {
		d.holders[gi.Name], d.nodes = p.lister.BaseHolders(gi)
	}
	for _, class := range slices.Sorted(maps.Keys(d.bytes)) {
		d.classes = append(d.classes, classDemand{class: class, bytes: d.bytes[class], lvs: lvs[class]})
	}
	return d, nil
}

// goldenImageOf is the GoldenImage a claim's volume is made from, or whose
// class a clone or restore takes, as the controller decides it
// (thinlvmv1.GoldenImageOf); nil when none, or when it does not exist
// (yet): no node holds its base.
func (p *Plugin) goldenImageOf(pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) (*thinlvmv1.GoldenImage, error) {
	name, channel := thinlvmv1.GoldenImageOf(pvc, sc.Parameters)
	if name == "" && channel != "" {
		ch, err := p.lister.GoldenImageChannel(channel)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		name = ch.Spec.GoldenImage
	}
	if name == "" {
		return nil, nil
	}
	gi, err := p.lister.GoldenImage(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return gi, err
}

// sourceNode is the node holding a claim's data source, "" when unknown,
// and the golden image it descends from, if any.
func (p *Plugin) sourceNode(ctx context.Context, namespace string, src *corev1.TypedLocalObjectReference) (string, *thinlvmv1.GoldenImage) {
	var lvName string
	switch {
	case src.Kind == "PersistentVolumeClaim" && (src.APIGroup == nil || *src.APIGroup == ""):
		pvc, err := p.lister.PVC(namespace, src.Name)
		if err != nil || pvc.Spec.VolumeName == "" {
			return "", nil
		}
		pv, err := p.lister.PV(pvc.Spec.VolumeName)
		if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName {
			return "", nil
		}
		lvName = pv.Spec.CSI.VolumeHandle
	case src.Kind == "VolumeSnapshot" && src.APIGroup != nil && *src.APIGroup == volumeSnapshotGVR.Group:
		h, err := p.lister.SnapshotHandle(ctx, namespace, src.Name)
		if err != nil || h == "" {
			return "", nil
		}
		lvName = h
	default:
		return "", nil
	}
	lv, err := p.lister.LogicalVolume(lvName)
	if err != nil {
		return "", nil
	}
	return lv.Spec.NodeName, p.baseOf(lv)
}

// baseOf is the golden image lv descends from through its sources, nil
// when none (or the chain is longer than any thinlvm makes).
func (p *Plugin) baseOf(lv *thinlvmv1.LogicalVolume) *thinlvmv1.GoldenImage {
	for range 32 {
		src := lv.Spec.Source
		if src == nil {
			return nil
		}
		if src.Kind == thinlvmv1.SourceGoldenImage {
			gi, err := p.lister.GoldenImage(src.Name)
			if err != nil {
				return nil
			}
			return gi
		}
		next, err := p.lister.LogicalVolume(src.Name)
		if err != nil {
			return nil
		}
		lv = next
	}
	return nil
}

// demandFrom reads the demand PreFilter wrote. A cycle without one is a pod
// with nothing for thinlvm to do (no thinlvm claims, or all of them bound
// already: a restarted StatefulSet pod or VM): PreFilter returned Skip,
// which spares only Filter, and kube-scheduler still runs PreScore,
// Reserve, Unreserve and the rest. Every extension point takes a nil
// demand as "nothing to do", never as an error.
func demandFrom(state fwk.CycleState) (*demand, *fwk.Status) {
	v, err := state.Read(stateKey)
	if errors.Is(err, fwk.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("read %s: %w", stateKey, err))
	}
	d, ok := v.(*demand)
	if !ok {
		return nil, fwk.AsStatus(fmt.Errorf("read %s: got %T, want *demand", stateKey, v))
	}
	return d, nil
}

// settleAfter is how long after its LV is made a reservation still counts:
// the node agent publishes a change within seconds (its interval is 2s by
// default), after which the LVMNode's room already excludes the volume.
const settleAfter = 5 * time.Second

// settled tells whether a reservation shows in the LVMNode: the LV of every
// claim is made (its LogicalVolume Ready) and the node has reported since,
// or long enough ago that it must have. A claim deleted meanwhile will
// never be made: it holds nothing.
func (p *Plugin) settled(r reservation, ln *thinlvmv1.LVMNode) bool {
	for _, c := range r.claims {
		ns, name, _ := strings.Cut(c, "/")
		pvc, err := p.lister.PVC(ns, name)
		if apierrors.IsNotFound(err) || err == nil && pvc.DeletionTimestamp != nil {
			continue
		}
		if err != nil || pvc.Spec.VolumeName == "" {
			return false
		}
		pv, err := p.lister.PV(pvc.Spec.VolumeName)
		if err != nil || pv.Spec.CSI == nil {
			return false
		}
		lv, err := p.lister.LogicalVolume(pv.Spec.CSI.VolumeHandle)
		if err != nil {
			return false
		}
		ready := meta.FindStatusCondition(lv.Status.Conditions, thinlvmv1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue {
			return false
		}
		reported := ln.Status.UpdateTime != nil && ln.Status.UpdateTime.Unix() > ready.LastTransitionTime.Unix()
		if !reported && p.ledger.now().Sub(ready.LastTransitionTime.Time) < settleAfter {
			return false
		}
	}
	return true
}

// Filter drops nodes without thinlvm, without the device class, or without
// room for the pod's volumes plus the golden bases they lack. Its room is
// what the LVMNode reports less what the ledger promised to pods the
// report does not show yet.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	d, st := demandFrom(state)
	if st != nil || d == nil {
		return st
	}
	node := ni.Node().Name
	n, err := p.lister.Node(node)
	if err != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node does not run thinlvm (no LVMNode)")
	}
	for _, cd := range d.classes {
		c := n.class(cd.class)
		if c == nil {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node has no thinlvm device class %q", cd.class))
		}
		held := p.ledger.reserved(node, c.name)
		if st := p.filterFull(pod, n.LVMNode, c, d, cd, held.lvs); st != nil {
			return st
		}
		// The bases the node lacks are populated there first (no image, no
		// second look for the class: Filter runs for every node).
		need := cd.bytes
		if len(d.images) > 0 {
			need = sizes.Add(need, n.LVMNode.Status.MissingBases(cd.class, d.images...))
		}
		if need > c.capacity {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("thinlvm device class %q holds at most %d bytes, the pod needs %d", c.name, c.capacity, need))
		}
		if free := c.available - held.bytes; need > free {
			if need <= c.available {
				p.hold(pod) // only reservations in flight stand in the way
			}
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("thinlvm device class %q has %d bytes free, the pod needs %d", c.name, max(free, 0), need))
		}
	}
	return nil
}

// filterFull refuses a device class that takes no new volumes whatever
// their size: its thin pool over its high-water mark (lvmd's limit on the
// pool's data and metadata use) or unhealthy, or its VG's metadata area
// without room for the pod's new volumes, the bases the node lacks and
// the heldLVs promised to other pods. Unschedulable, not unresolvable:
// removals or a grown pool make room.
func (p *Plugin) filterFull(pod *corev1.Pod, ln *thinlvmv1.LVMNode, c *classState, d *demand, cd classDemand, heldLVs int) *fwk.Status {
	dc := c.status
	if c.full {
		state := "over its high-water mark"
		if dc.PoolHealth != "" {
			state = string(dc.PoolHealth)
		}
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("thinlvm device class %q takes no new volumes: thin pool %s is %s (data %s%%, metadata %s%%)",
			dc.Name, dc.VolumeGroup+"/"+dc.ThinPool, state, dc.DataPercent, dc.MetadataPercent))
	}
	if c.lvsLeft < 0 {
		return nil // not reported (an older node agent): lvmd still refuses
	}
	need := cd.lvs
	for _, gi := range d.images {
		if ln.Status.MissingBases(cd.class, gi) > 0 {
			need++
		}
	}
	if left := c.lvsLeft - heldLVs; need > left {
		if need <= c.lvsLeft {
			p.hold(pod) // only reservations in flight stand in the way
		}
		m := dc.VGMetadata
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("thinlvm device class %q: the metadata area of volume group %q has room for %d more volumes (%s of %s free), the pod needs %d",
			dc.Name, dc.VolumeGroup, max(left, 0), m.Free.String(), m.Size.String(), need))
	}
	return nil
}

// Reserve holds the pod's bytes on the node until its LVMNode shows them.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	d, st := demandFrom(state)
	if st != nil || d == nil {
		return st
	}
	n, err := p.lister.Node(node)
	if err != nil {
		return fwk.AsStatus(err)
	}
	bytes, lvs := map[string]int64{}, map[string]int{}
	for _, cd := range d.classes {
		if c := n.class(cd.class); c != nil {
			bytes[c.name] += cd.bytes
			lvs[c.name] += cd.lvs
		}
	}
	p.ledger.reserve(pod.UID, reservation{node: node, bytes: bytes, lvs: lvs, claims: d.claims})
	klog.FromContext(ctx).V(4).Info("Reserved thinlvm bytes", "pod", klog.KObj(pod), "node", klog.KRef("", node), "bytes", bytes)
	return nil
}

// Unreserve drops the pod's reservation.
func (p *Plugin) Unreserve(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, node string) {
	p.ledger.release(pod.UID)
	klog.FromContext(ctx).V(4).Info("Released thinlvm reservation", "pod", klog.KObj(pod), "node", klog.KRef("", node))
}

// PreScore skips Score for a pod with no thinlvm demand in this cycle.
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	d, st := demandFrom(state)
	if st != nil {
		return st
	}
	if d == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score weighs free space (spread or bin-pack, per device class weights)
// and golden-base locality.
func (p *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	d, st := demandFrom(state)
	if st != nil || d == nil {
		return 0, st
	}
	node := ni.Node().Name
	n, err := p.lister.Node(node)
	if err != nil {
		return 0, nil
	}
	var capSum, weightSum int64
	for _, cd := range d.classes {
		c := n.class(cd.class)
		if c == nil {
			continue
		}
		w, ok := p.args.DeviceClassWeights[c.name]
		if !ok {
			w = 1
		}
		capSum += w * capacityScore(p.args.CapacityStrategy, c.available-p.ledger.reserved(node, c.name).bytes, cd.bytes, c.capacity)
		weightSum += w
	}
	var capScore int64
	if weightSum > 0 {
		capScore = capSum / weightSum
	}
	var locScore int64
	for _, gi := range d.images {
		locScore += localityScore(n.LVMNode.Status.BaseState(gi), d.holders[gi.Name], d.nodes)
	}
	parts := int64(len(d.images))
	if d.sourceNode != "" {
		locScore += copyScore(node == d.sourceNode, d.sourceBase != nil && n.LVMNode.Status.BaseState(d.sourceBase) == thinlvmv1.GoldenBaseReady)
		parts++
	}
	if parts > 0 {
		locScore /= parts
	}
	score := combine(capScore, locScore, p.args.CapacityWeight, p.args.LocalityWeight)
	// klog.V first: FromContext walks the context for every node.
	if klog.V(5).Enabled() {
		klog.FromContext(ctx).V(5).Info("thinlvm score", "pod", klog.KObj(pod), "node", klog.KRef("", node), "capacity", capScore, "locality", locScore, "score", score)
	}
	return score, nil
}

// poolCapacity is the most a device class can ever hold: its pool times
// the overprovision ratio, saturated at the largest int64.
func poolCapacity(dc *thinlvmv1.DeviceClassStatus) int64 {
	c := float64(dc.PoolSize.Value()) * ratio(dc.OverprovisionRatio)
	if c >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(c)
}

func ratio(s string) float64 {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r < 1 {
		return 1
	}
	return r
}

// ScoreExtensions implements the framework's ScorePlugin.
func (p *Plugin) ScoreExtensions() scoreExtensions { return p }

// NormalizeScore scales the best node to the framework's maximum.
func (p *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, scores nodeScoreList) *fwk.Status {
	s := make([]int64, len(scores))
	for i := range scores {
		s[i] = scores[i].Score
	}
	normalize(s)
	for i := range scores {
		scores[i].Score = s[i]
	}
	return nil
}

// EventsToRegister requeues pods this plugin rejected when an LVMNode
// changes (room freed, a golden base became Ready: bases are reported in
// LVMNodes), a GoldenImage or GoldenImageChannel is made or changes, or a
// claim is added or updated.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.EventResource("lvmnodes.v1alpha1.thinlvm.io"), ActionType: fwk.Add | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.EventResource("goldenimages.v1alpha1.thinlvm.io"), ActionType: fwk.Add | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.EventResource("goldenimagechannels.v1alpha1.thinlvm.io"), ActionType: fwk.Add | fwk.Update}},
		{Event: fwk.ClusterEvent{Resource: fwk.PersistentVolumeClaim, ActionType: fwk.Add | fwk.Update}},
	}, nil
}
