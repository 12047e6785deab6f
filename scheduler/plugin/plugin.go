package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

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

	// lvmNodeHint decides once per LVMNode event whether it may help a
	// waiting pod (EventsToRegister).
	lvmNodeHint lvmNodeHint
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
	// SnapshotHandle is the CSI snapshot ID of a bound VolumeSnapshot.
	SnapshotHandle(namespace, name string) (string, error)
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
	// A restore's source is found through its VolumeSnapshot and content:
	// informers, not two reads per restore in every cycle. A cluster
	// without the snapshot CRDs has nothing to restore from (an informer
	// of a resource not served would never sync).
	served, err := servesSnapshots(h.ClientSet().Discovery())
	if err != nil {
		return nil, err
	}
	if served {
		snapshots := factory.ForResource(volumeSnapshotGVR).Informer()
		if err := snapshots.SetTransform(snapshotRefOf("status", "boundVolumeSnapshotContentName")); err != nil {
			return nil, err
		}
		contents := factory.ForResource(snapshotContentGVR).Informer()
		if err := contents.SetTransform(snapshotRefOf("status", "snapshotHandle")); err != nil {
			return nil, err
		}
		l.snapshots, l.contents = snapshots.GetIndexer(), contents.GetIndexer()
	} else {
		klog.FromContext(ctx).Info("The cluster serves no VolumeSnapshots: claims restored from one are placed as if new", "groupVersion", volumeSnapshotGVR.GroupVersion())
	}
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

// servesSnapshots tells whether the API server serves VolumeSnapshots and
// VolumeSnapshotContents (the external snapshotter's CRDs).
func servesSnapshots(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(volumeSnapshotGVR.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: discover %s: %w", Name, volumeSnapshotGVR.GroupVersion(), err)
	}
	var found int
	for _, r := range list.APIResources {
		if r.Name == volumeSnapshotGVR.Resource || r.Name == snapshotContentGVR.Resource {
			found++
		}
	}
	return found == 2, nil
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
