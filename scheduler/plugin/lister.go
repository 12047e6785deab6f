package plugin

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// clusterLister reads the scheduler's informers and, for thinlvm's types,
// dynamic informers of its own.
type clusterLister struct {
	pvcs     corelisters.PersistentVolumeClaimLister
	pvs      corelisters.PersistentVolumeLister
	scs      storagelisters.StorageClassLister
	nodes    *nodeIndex
	lvs      cache.Indexer
	images   cache.Indexer
	channels cache.Indexer
	// snapshots and contents hold VolumeSnapshots and their contents (as
	// snapshotRefs); nil when the cluster serves none.
	snapshots cache.Indexer
	contents  cache.Indexer
}

func (l *clusterLister) GoldenImage(name string) (*thinlvmv1.GoldenImage, error) {
	return fromIndexer[thinlvmv1.GoldenImage](l.images, "goldenimages", name)
}

func (l *clusterLister) GoldenImageChannel(name string) (*thinlvmv1.GoldenImageChannel, error) {
	return fromIndexer[thinlvmv1.GoldenImageChannel](l.channels, "goldenimagechannels", name)
}

func (l *clusterLister) PVC(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return l.pvcs.PersistentVolumeClaims(ns).Get(name)
}

func (l *clusterLister) PV(name string) (*corev1.PersistentVolume, error) { return l.pvs.Get(name) }

func (l *clusterLister) StorageClass(name string) (*storagev1.StorageClass, error) {
	return l.scs.Get(name)
}

// typed converts an informer's unstructured object to *T (a transform);
// deletion tombstones pass through.
func typed[T any](obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, err
	}
	return out, nil
}

func fromIndexer[T any](idx cache.Indexer, resource, name string) (*T, error) {
	obj, ok, err := idx.GetByKey(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(thinlvmv1.GroupVersion.WithResource(resource).GroupResource(), name)
	}
	out, ok := obj.(*T)
	if !ok {
		return nil, fmt.Errorf("%s %s: unexpected %T", resource, name, obj)
	}
	return out, nil
}

// Node reads the nodes' index: Filter and Score ask for every node of
// every cycle, and a plain map is one lookup fewer than the informer's
// store (keyed through its generic indexer).
func (l *clusterLister) Node(name string) (*NodeState, error) {
	if n := l.nodes.node(name); n != nil {
		return n, nil
	}
	return nil, apierrors.NewNotFound(lvmNodesGVR.GroupResource(), name)
}

// NodeState is what Filter and Score read of a node: its LVMNode and each
// device class's figures as plain values (a Quantity's value, the
// overprovision ratio parsed), worked out once when the LVMNode changes
// instead of for every node of every cycle.
type NodeState struct {
	LVMNode *thinlvmv1.LVMNode
	classes []classState
	// inline holds the class of a node with one, in the same allocation:
	// Filter and Score then read no other memory of the node.
	inline [1]classState
}

// classState is one device class of a node.
type classState struct {
	status    *thinlvmv1.DeviceClassStatus
	name      string
	isDefault bool
	available int64 // Available
	capacity  int64 // the most it can ever hold (poolCapacity)
	// full: over its thin pool's high-water mark or unhealthy, it takes no
	// new volume whatever its size.
	full bool
	// lvsLeft is the room in its VG's metadata area, in volumes; -1 when
	// the node does not report it (an older node agent).
	lvsLeft int
}

// NewNodeState works out ln's NodeState; ln must not change afterwards
// (an informer's objects do not).
func NewNodeState(ln *thinlvmv1.LVMNode) *NodeState {
	n := &NodeState{LVMNode: ln}
	if n.classes = n.inline[:]; len(ln.Status.DeviceClasses) != 1 {
		n.classes = make([]classState, len(ln.Status.DeviceClasses))
	}
	for i := range ln.Status.DeviceClasses {
		dc := &ln.Status.DeviceClasses[i]
		n.classes[i] = classState{status: dc, name: dc.Name, isDefault: dc.Default, available: dc.Available.Value(),
			capacity: poolCapacity(dc), full: dc.OverHighWatermark || dc.PoolHealth != "", lvsLeft: -1}
		if m := dc.VGMetadata; m != nil {
			n.classes[i].lvsLeft = int(m.LVsLeft)
		}
	}
	return n
}

// class is the device class of that name, "" for the node's default, as
// LVMNodeStatus.DeviceClass finds it; nil when the node has none.
func (n *NodeState) class(name string) *classState {
	for i := range n.classes {
		if c := &n.classes[i]; name == "" && c.isDefault || name != "" && c.name == name {
			return c
		}
	}
	if name == "" && len(n.classes) == 1 {
		return &n.classes[0]
	}
	return nil
}

func (l *clusterLister) BaseHolders(image *thinlvmv1.GoldenImage) (holders, nodes int) {
	return l.nodes.holders(image)
}

// baseKey names a golden base as a node reports it: its image's name and
// its LV (from the image's UID).
type baseKey struct{ name, lv string }

// nodeIndex holds the nodes' states by name and counts
// the nodes that hold each golden base (LVMNodeStatus.BaseState Held): an
// informer's event handler keeps both as LVMNodes come and go. PreFilter
// asks for the holders of every pod's golden images, and counting over
// all LVMNodes would cost O(nodes) per pod. The index follows the
// informer's store by the handler's delay.
type nodeIndex struct {
	mu     sync.RWMutex
	byName map[string]*NodeState
	held   map[string][]baseKey // the bases each node holds, by node
	counts map[baseKey]int
}

func newNodeIndex() *nodeIndex {
	return &nodeIndex{byName: map[string]*NodeState{}, held: map[string][]baseKey{}, counts: map[baseKey]int{}}
}

// heldBases are the bases ln holds. A node's first entry of a base is the
// one that counts (LVMNodeStatus.Base).
func heldBases(ln *thinlvmv1.LVMNode) []baseKey {
	var held []baseKey
	for i, b := range ln.Status.GoldenBases {
		first := true
		for _, o := range ln.Status.GoldenBases[:i] {
			if o.Name == b.Name && o.LV == b.LV {
				first = false
				break
			}
		}
		if first && b.State.Held() {
			held = append(held, baseKey{b.Name, b.LV})
		}
	}
	return held
}

func (x *nodeIndex) set(ln *thinlvmv1.LVMNode) {
	held, state := heldBases(ln), NewNodeState(ln)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byName[ln.Name] = state
	x.dropLocked(ln.Name)
	x.held[ln.Name] = held
	for _, k := range held {
		x.counts[k]++
	}
}

func (x *nodeIndex) remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byName, name)
	x.dropLocked(name)
	delete(x.held, name)
}

func (x *nodeIndex) dropLocked(name string) {
	for _, k := range x.held[name] {
		if x.counts[k]--; x.counts[k] == 0 {
			delete(x.counts, k)
		}
	}
}

func (x *nodeIndex) node(name string) *NodeState {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.byName[name]
}

func (x *nodeIndex) holders(image *thinlvmv1.GoldenImage) (holders, nodes int) {
	k := baseKey{image.Name, thinlvmv1.BaseLVName(image)}
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.counts[k], len(x.held)
}

// handler keeps the index from an LVMNode informer (typed objects).
func (x *nodeIndex) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ln, ok := obj.(*thinlvmv1.LVMNode); ok {
				x.set(ln)
			}
		},
		UpdateFunc: func(_, obj any) {
			if ln, ok := obj.(*thinlvmv1.LVMNode); ok {
				x.set(ln)
			}
		},
		DeleteFunc: func(obj any) {
			switch o := obj.(type) {
			case *thinlvmv1.LVMNode:
				x.remove(o.Name)
			case cache.DeletedFinalStateUnknown:
				x.remove(o.Key) // cluster-scoped: the key is the name
			}
		},
	}
}

func (l *clusterLister) LogicalVolume(name string) (*thinlvmv1.LogicalVolume, error) {
	return fromIndexer[thinlvmv1.LogicalVolume](l.lvs, "logicalvolumes", name)
}

// SnapshotHandle follows a VolumeSnapshot to its content's snapshot handle
// (the snapshot's LogicalVolume name), "" while it is not bound or when
// the cluster serves no VolumeSnapshots.
func (l *clusterLister) SnapshotHandle(ns, name string) (string, error) {
	if l.snapshots == nil {
		return "", nil
	}
	vs, err := fromIndexer[snapshotRef](l.snapshots, "volumesnapshots", ns+"/"+name)
	if err != nil || vs.target == "" {
		return "", err
	}
	vsc, err := fromIndexer[snapshotRef](l.contents, "volumesnapshotcontents", vs.target)
	if err != nil {
		return "", err
	}
	return vsc.target, nil
}

// snapshotRef is what the plugin keeps of a VolumeSnapshot (target: the
// content it is bound to) or a VolumeSnapshotContent (target: its snapshot
// handle), with the metadata an informer's store needs; the rest of the
// object is dropped as it arrives.
type snapshotRef struct {
	metav1.ObjectMeta
	target string
}

// snapshotRefOf is the informers' transform: field is the path of the
// object's target.
func snapshotRefOf(field ...string) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a deletion tombstone
		}
		target, _, _ := unstructured.NestedString(u.Object, field...)
		return &snapshotRef{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(),
			UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}, target: target}, nil
	}
}
