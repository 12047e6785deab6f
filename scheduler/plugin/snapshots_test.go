package plugin

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

func snapshotObject(kind, ns, name string, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: volumeSnapshotGVR.Group, Version: "v1", Kind: kind})
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(map[string]string{"kept": "no"})
	return u
}

// A restore's source is found through the snapshot informers (transformed
// to what the plugin reads), following the VolumeSnapshot to its content's
// handle; "" while the snapshot is unbound or unknown.
func TestSnapshotHandleFromInformers(t *testing.T) {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		volumeSnapshotGVR: "VolumeSnapshotList", snapshotContentGVR: "VolumeSnapshotContentList"},
		snapshotObject("VolumeSnapshot", "default", "snap", map[string]any{"boundVolumeSnapshotContentName": "snapcontent-1"}),
		snapshotObject("VolumeSnapshot", "default", "pending", map[string]any{}),
		snapshotObject("VolumeSnapshotContent", "", "snapcontent-1", map[string]any{"snapshotHandle": "lv-snap-1"}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	snapshots, contents := factory.ForResource(volumeSnapshotGVR).Informer(), factory.ForResource(snapshotContentGVR).Informer()
	if err := snapshots.SetTransform(snapshotRefOf("status", "boundVolumeSnapshotContentName")); err != nil {
		t.Fatal(err)
	}
	if err := contents.SetTransform(snapshotRefOf("status", "snapshotHandle")); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%s did not sync", gvr)
		}
	}
	l := &clusterLister{snapshots: snapshots.GetIndexer(), contents: contents.GetIndexer()}
	for _, c := range []struct{ name, want string }{{"snap", "lv-snap-1"}, {"pending", ""}} {
		if got, err := l.SnapshotHandle("default", c.name); err != nil || got != c.want {
			t.Errorf("SnapshotHandle(%s) = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if _, err := l.SnapshotHandle("default", "missing"); err == nil {
		t.Error("a missing VolumeSnapshot: no error")
	}
	obj, _, _ := snapshots.GetIndexer().GetByKey("default/snap")
	if ref, ok := obj.(*snapshotRef); !ok || ref.Annotations != nil {
		t.Errorf("stored %#v: want a snapshotRef without the rest of the object", obj)
	}
	if h, err := (&clusterLister{}).SnapshotHandle("default", "snap"); h != "" || err != nil {
		t.Errorf("without snapshot CRDs: %q, %v; want nothing", h, err)
	}
}

func TestServesSnapshots(t *testing.T) {
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	if ok, err := servesSnapshots(d); ok || err != nil {
		t.Errorf("no snapshot group: %v, %v; want false", ok, err)
	}
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "snapshot.storage.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "volumesnapshots"}, {Name: "volumesnapshotcontents"}, {Name: "volumesnapshotclasses"}}}}
	if ok, err := servesSnapshots(d); !ok || err != nil {
		t.Errorf("snapshot CRDs served: %v, %v; want true", ok, err)
	}
}
