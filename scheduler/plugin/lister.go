package plugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
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
	lvmNodes cache.Indexer
	lvs      cache.Indexer
	images   cache.Indexer
	channels cache.Indexer
	dyn      dynamic.Interface
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

func (l *clusterLister) LVMNode(name string) (*thinlvmv1.LVMNode, error) {
	return fromIndexer[thinlvmv1.LVMNode](l.lvmNodes, "lvmnodes", name)
}

func (l *clusterLister) LVMNodes() ([]*thinlvmv1.LVMNode, error) {
	var out []*thinlvmv1.LVMNode
	for _, key := range l.lvmNodes.ListKeys() {
		n, err := l.LVMNode(key)
		if err != nil {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

func (l *clusterLister) LogicalVolume(name string) (*thinlvmv1.LogicalVolume, error) {
	return fromIndexer[thinlvmv1.LogicalVolume](l.lvs, "logicalvolumes", name)
}

// SnapshotHandle follows a VolumeSnapshot to its content's snapshot handle
// (the snapshot's LogicalVolume name). Restores are rare: a direct read.
func (l *clusterLister) SnapshotHandle(ctx context.Context, ns, name string) (string, error) {
	vs, err := l.dyn.Resource(volumeSnapshotGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	if content == "" {
		return "", nil
	}
	vsc, err := l.dyn.Resource(snapshotContentGVR).Get(ctx, content, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	h, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	return h, nil
}
