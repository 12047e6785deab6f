package reconciler_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

// sourceNode is the node of the source volumes: a Node exists for it, or
// the node cleanup would delete its volumes.
const sourceNode = "src-node"

// makeSourceNode makes the Node sourceNode unless it exists.
func makeSourceNode(t *testing.T) {
	t.Helper()
	if err := k8s.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: sourceNode}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// sourceVolume makes a LogicalVolume of role on sourceNode, Ready with
// current size current.
func sourceVolume(t *testing.T, name string, role thinlvmv1.VolumeRole, class, size, current string) {
	t.Helper()
	makeSourceNode(t)
	lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.LogicalVolumeSpec{
		Name: name, NodeName: sourceNode, DeviceClass: class, Size: resource.MustParse(size), Role: role}}
	create(t, lv)
	q := resource.MustParse(current)
	lv.Status.CurrentSize = &q
	lv.Status.Conditions = []metav1.Condition{{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionTrue, Reason: thinlvmv1.ReasonCreated,
		LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Update(context.Background(), lv); err != nil {
		t.Fatal(err)
	}
}

// boundClaim makes a claim of class bound to a PV of driver whose volume
// handle is handle (no CSI source when driver is empty), bound by hand as
// the PV controller would.
func boundClaim(t *testing.T, name, class, driver, handle string) {
	t.Helper()
	ctx := context.Background()
	pvc := pendingClaim(t, name, class)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name}, Spec: corev1.PersistentVolumeSpec{
		Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: class,
		ClaimRef:         &corev1.ObjectReference{Namespace: "default", Name: name, UID: pvc.UID},
	}}
	if driver != "" {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}
	} else {
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/srv/" + name}
	}
	create(t, pv)
	pvc.Spec.VolumeName = pv.Name
	if err := k8s.Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := k8s.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

func pendingClaim(t *testing.T, name, class string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: ptr.To(class),
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	create(t, pvc)
	return pvc
}

func storageClass(t *testing.T, name, provisioner string) {
	t.Helper()
	create(t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner})
}

func volumeImage(name string, claim, snapshot *thinlvmv1.ClaimSource, size, class string) *thinlvmv1.GoldenImage {
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: thinlvmv1.GoldenImageSpec{Source: thinlvmv1.ImageSource{PVC: claim, VolumeSnapshot: snapshot}, DeviceClass: class}}
	if size != "" {
		gi.Spec.Size = resource.MustParse(size)
	}
	return gi
}

// waitReady waits for the image's Ready condition to have reason and
// returns the image.
func waitReady(t *testing.T, name, reason string) *thinlvmv1.GoldenImage {
	t.Helper()
	testutil.Eventually(t, name+" Ready reason "+reason, func() bool { return readyReason(getImage(t, name)) == reason })
	return getImage(t, name)
}

// touch changes an annotation of obj, as any change of a claim or a
// VolumeSnapshot wakes the images waiting for it.
func touch(t *testing.T, obj client.Object, value string) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetAnnotations(map[string]string{"test.thinlvm.io/touched": value})
	if err := k8s.Patch(ctx, obj, patch); err != nil {
		t.Fatal(err)
	}
}

// A claim source resolves once the claim is bound and its volume Ready,
// to the LogicalVolume, its node and its size (the current size where lvm
// rounded up); that is written once and never changes, even when the claim
// goes.
func TestGoldenImageFromClaim(t *testing.T) {
	ctx := context.Background()
	storageClass(t, "src-thinlvm", thinlvmv1.DriverName)
	create(t, volumeImage("from-claim", &thinlvmv1.ClaimSource{Namespace: "default", Name: "src"}, nil, "", ""))
	gi := waitReady(t, "from-claim", thinlvmv1.ReasonSourceNotReady)
	if c := meta.FindStatusCondition(gi.Status.Conditions, thinlvmv1.ConditionImageReady); !strings.Contains(c.Message, "claim default/src not found") {
		t.Errorf("message %q, want the claim not found", c.Message)
	}
	pvc := pendingClaim(t, "src", "src-thinlvm")
	testutil.Eventually(t, "the claim not bound", func() bool {
		c := meta.FindStatusCondition(getImage(t, "from-claim").Status.Conditions, thinlvmv1.ConditionImageReady)
		return c != nil && strings.Contains(c.Message, "claim default/src is not bound")
	})

	// The PV, bound by hand (there is no PV controller here), names a
	// LogicalVolume that is not Ready yet.
	lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-src"}, Spec: thinlvmv1.LogicalVolumeSpec{
		Name: "pvc-src", NodeName: sourceNode, Size: resource.MustParse("1000Mi")}}
	makeSourceNode(t)
	create(t, lv)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-src"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1000Mi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName:       "src-thinlvm",
		ClaimRef:               &corev1.ObjectReference{Namespace: "default", Name: "src", UID: pvc.UID},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: "pvc-src"}},
	}}
	create(t, pv)
	pvc.Spec.VolumeName = pv.Name
	if err := k8s.Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := k8s.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the volume not Ready", func() bool {
		c := meta.FindStatusCondition(getImage(t, "from-claim").Status.Conditions, thinlvmv1.ConditionImageReady)
		return c != nil && strings.Contains(c.Message, "LogicalVolume pvc-src of claim default/src is not Ready")
	})
	q := resource.MustParse("1004Mi") // rounded up to whole extents
	lv.Status.CurrentSize = &q
	lv.Status.Conditions = []metav1.Condition{{Type: thinlvmv1.ConditionReady, Status: metav1.ConditionTrue, Reason: thinlvmv1.ReasonCreated, LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Update(ctx, lv); err != nil {
		t.Fatal(err)
	}
	// Made Ready before its PV in real life; here the claim's change wakes
	// the image rather than its backoff.
	touch(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "src"}}, "1")
	want := &thinlvmv1.SourceVolumeStatus{LogicalVolume: "pvc-src", NodeName: sourceNode, Size: resource.MustParse("1004Mi")}
	gi = waitReady(t, "from-claim", thinlvmv1.ReasonNoReadyBase)
	if diff := cmp.Diff(want, gi.Status.SourceVolume); diff != "" {
		t.Fatalf("source volume (-want +got):\n%s", diff)
	}

	// The claim and its volume go; the first base is made on the node:
	// the source volume stays what it was.
	if err := k8s.Delete(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, pv); err != nil {
		t.Fatal(err)
	}
	setBases(t, sourceNode, thinlvmv1.GoldenBaseStatus{Name: gi.Name, LV: thinlvmv1.BaseLVName(gi), Size: want.Size, State: thinlvmv1.GoldenBaseReady, From: thinlvmv1.BaseFromVolume})
	gi = waitReady(t, "from-claim", thinlvmv1.ReasonBaseReady)
	if diff := cmp.Diff(want, gi.Status.SourceVolume); diff != "" {
		t.Errorf("source volume changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{sourceNode}, gi.Status.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

// Sources that are not a thinlvm volume, or that the image cannot hold,
// are refused with SourceInvalid and resolve to nothing.
func TestGoldenImageInvalidSources(t *testing.T) {
	storageClass(t, "inv-thinlvm", thinlvmv1.DriverName)
	storageClass(t, "inv-other", "other.example.com")
	pendingClaim(t, "inv-other-class", "inv-other")
	boundClaim(t, "inv-hostpath", "", "", "") // a static PV, no class
	sourceVolume(t, "inv-big", thinlvmv1.RoleVolume, "", "2Gi", "2Gi")
	boundClaim(t, "inv-big", "inv-thinlvm", thinlvmv1.DriverName, "inv-big")
	sourceVolume(t, "inv-snap", thinlvmv1.RoleSnapshot, "", "1Gi", "1Gi")
	boundClaim(t, "inv-snap", "inv-thinlvm", thinlvmv1.DriverName, "inv-snap")
	sourceVolume(t, "inv-slow", thinlvmv1.RoleVolume, "slow", "1Gi", "1Gi")
	boundClaim(t, "inv-slow", "inv-thinlvm", thinlvmv1.DriverName, "inv-slow")
	for _, tc := range []struct {
		name, claim, size, class string
		message                  string
	}{
		{name: "inv-1", claim: "inv-other-class", message: "claim default/inv-other-class is of StorageClass inv-other, whose provisioner is other.example.com, not thinlvm.io"},
		{name: "inv-2", claim: "inv-hostpath", message: "claim default/inv-hostpath is bound to PersistentVolume pv-inv-hostpath, which is not a thinlvm.io volume"},
		{name: "inv-3", claim: "inv-big", size: "1Gi", message: "spec.size 1Gi is smaller than claim default/inv-big, whose volume is 2Gi"},
		{name: "inv-4", claim: "inv-snap", message: "LogicalVolume inv-snap of claim default/inv-snap is a Snapshot, not a Volume"},
		{name: "inv-5", claim: "inv-slow", class: "fast", message: `spec.deviceClass "fast" is not the device class of claim default/inv-slow ("slow" on node src-node)`},
	} {
		t.Run(tc.message, func(t *testing.T) {
			create(t, volumeImage(tc.name, &thinlvmv1.ClaimSource{Namespace: "default", Name: tc.claim}, nil, tc.size, tc.class))
			gi := waitReady(t, tc.name, thinlvmv1.ReasonSourceInvalid)
			c := meta.FindStatusCondition(gi.Status.Conditions, thinlvmv1.ConditionImageReady)
			if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tc.message) {
				t.Errorf("Ready %s %q, want False with %q", c.Status, c.Message, tc.message)
			}
			if gi.Status.SourceVolume != nil {
				t.Errorf("source volume %+v, want none", gi.Status.SourceVolume)
			}
		})
	}
}

var (
	snapshotGVK = snapshotKind("VolumeSnapshot")
	contentGVK  = snapshotKind("VolumeSnapshotContent")
)

func snapshotKind(kind string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: kind}
}

func newSnapshotObject(gvk metav1.GroupVersionKind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gvk.Group + "/" + gvk.Version)
	u.SetKind(gvk.Kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// setSnapshotStatus writes status on the snapshot object u.
func setSnapshotStatus(t *testing.T, u *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, u); err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = status
	if err := k8s.Status().Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// snapshotWithContent makes a VolumeSnapshot and its content of driver,
// whose snapshot handle is handle, as the snapshotter would, not ready to
// use yet.
func snapshotWithContent(t *testing.T, name, driver, handle string) (vs, content *unstructured.Unstructured) {
	t.Helper()
	vs = newSnapshotObject(snapshotGVK, "default", name, map[string]any{
		"source": map[string]any{"persistentVolumeClaimName": "somewhere"}, "volumeSnapshotClassName": "thinlvm"})
	create(t, vs)
	content = newSnapshotObject(contentGVK, "", "snapcontent-"+name, map[string]any{
		"driver": driver, "deletionPolicy": "Delete", "source": map[string]any{"volumeHandle": "pvc-somewhere"},
		"volumeSnapshotRef": map[string]any{"namespace": "default", "name": name, "uid": string(vs.GetUID())}})
	create(t, content)
	setSnapshotStatus(t, content, map[string]any{"snapshotHandle": handle, "readyToUse": true})
	return vs, content
}

// A VolumeSnapshot source resolves once the snapshot is ready to use, to
// its content's snapshot LogicalVolume; another driver's is refused.
func TestGoldenImageFromVolumeSnapshot(t *testing.T) {
	create(t, volumeImage("from-snap", nil, &thinlvmv1.ClaimSource{Namespace: "default", Name: "snap"}, "2Gi", ""))
	gi := waitReady(t, "from-snap", thinlvmv1.ReasonSourceNotReady)
	if c := meta.FindStatusCondition(gi.Status.Conditions, thinlvmv1.ConditionImageReady); !strings.Contains(c.Message, "VolumeSnapshot default/snap not found") {
		t.Errorf("message %q, want the snapshot not found", c.Message)
	}
	sourceVolume(t, "snapshot-lv", thinlvmv1.RoleSnapshot, "", "1Gi", "1Gi")
	vs, content := snapshotWithContent(t, "snap", thinlvmv1.DriverName, "snapshot-lv")
	testutil.Eventually(t, "the snapshot not ready", func() bool {
		c := meta.FindStatusCondition(getImage(t, "from-snap").Status.Conditions, thinlvmv1.ConditionImageReady)
		return c != nil && strings.Contains(c.Message, "VolumeSnapshot default/snap is not ready to use")
	})
	setSnapshotStatus(t, vs, map[string]any{"boundVolumeSnapshotContentName": content.GetName(), "readyToUse": true})
	gi = waitReady(t, "from-snap", thinlvmv1.ReasonNoReadyBase)
	want := &thinlvmv1.SourceVolumeStatus{LogicalVolume: "snapshot-lv", NodeName: sourceNode, Size: resource.MustParse("1Gi")}
	if diff := cmp.Diff(want, gi.Status.SourceVolume); diff != "" {
		t.Errorf("source volume (-want +got):\n%s", diff)
	}

	create(t, volumeImage("from-other-snap", nil, &thinlvmv1.ClaimSource{Namespace: "default", Name: "other-snap"}, "", ""))
	vs, content = snapshotWithContent(t, "other-snap", "other.example.com", "snap-123")
	setSnapshotStatus(t, vs, map[string]any{"boundVolumeSnapshotContentName": content.GetName(), "readyToUse": true})
	gi = waitReady(t, "from-other-snap", thinlvmv1.ReasonSourceInvalid)
	msg := "VolumeSnapshot default/other-snap is bound to VolumeSnapshotContent snapcontent-other-snap of driver other.example.com, not thinlvm.io"
	if c := meta.FindStatusCondition(gi.Status.Conditions, thinlvmv1.ConditionImageReady); c.Message != msg || gi.Status.SourceVolume != nil {
		t.Errorf("message %q, source volume %+v; want %q and none", c.Message, gi.Status.SourceVolume, msg)
	}
}
