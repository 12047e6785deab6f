package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-helpers/storage/ephemeral"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/sizes"
)

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
	d, err := p.demandOf(pod)
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

func (p *Plugin) demandOf(pod *corev1.Pod) (*demand, error) {
	d := &demand{bytes: map[string]int64{}, holders: map[string]int{}}
	lvs := map[string]int{}
	for _, v := range podClaims(pod) {
		pvc, err := p.lister.PVC(pod.Namespace, v.claim)
		if apierrors.IsNotFound(err) {
			continue // VolumeBinding reports the missing claim
		}
		if err != nil {
			return nil, err
		}
		if v.ephemeral && ephemeral.VolumeIsForPod(pod, pvc) != nil {
			continue // another pod's claim of that name: VolumeBinding reports it
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
				d.sourceNode, d.sourceBase = p.sourceNode(pvc.Namespace, src)
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

// podClaim is a claim a pod's volume uses: a PersistentVolumeClaim volume's,
// or the one Kubernetes makes for a generic ephemeral volume.
type podClaim struct {
	claim     string
	ephemeral bool
}

// podClaims are the claims of the pod's volumes, in the pod's order.
func podClaims(pod *corev1.Pod) []podClaim {
	var out []podClaim
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, podClaim{claim: v.PersistentVolumeClaim.ClaimName})
		case v.Ephemeral != nil:
			out = append(out, podClaim{claim: ephemeral.VolumeClaimName(pod, v), ephemeral: true})
		}
	}
	return out
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
func (p *Plugin) sourceNode(namespace string, src *corev1.TypedLocalObjectReference) (string, *thinlvmv1.GoldenImage) {
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
		h, err := p.lister.SnapshotHandle(namespace, src.Name)
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
// when none (thinlvmv1.SourceImage).
func (p *Plugin) baseOf(lv *thinlvmv1.LogicalVolume) *thinlvmv1.GoldenImage {
	name := thinlvmv1.SourceImage(lv, func(name string) *thinlvmv1.LogicalVolume {
		next, err := p.lister.LogicalVolume(name)
		if err != nil {
			return nil
		}
		return next
	})
	if name == "" {
		return nil
	}
	gi, err := p.lister.GoldenImage(name)
	if err != nil {
		return nil
	}
	return gi
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
