package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// The snapshot API, read as unstructured objects (as the scheduler plugin
// reads it): thinlvm builds no client of the external-snapshotter module.
var (
	volumeSnapshotGVK        = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"}
	volumeSnapshotContentGVK = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshotContent"}
)

// sourceProblem is why a pvc or volumeSnapshot source does not resolve:
// not yet (ReasonSourceNotReady, looked at again), or not as it is
// (ReasonSourceInvalid).
type sourceProblem struct {
	reason, message string
}

func notReady(format string, args ...any) *sourceProblem {
	return &sourceProblem{reason: thinlvmv1.ReasonSourceNotReady, message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *sourceProblem {
	return &sourceProblem{reason: thinlvmv1.ReasonSourceInvalid, message: fmt.Sprintf(format, args...)}
}

func claimKey(s *thinlvmv1.ClaimSource) string { return s.Namespace + "/" + s.Name }

// resolveSource follows gi's pvc or volumeSnapshot source to its
// LogicalVolume: a bound claim to its PV's volume handle, a VolumeSnapshot
// ready to use to its content's snapshot handle. Either is the
// LogicalVolume's name. The volume must be thinlvm's, of the role the
// source says, Ready, in the image's device class, and no larger than
// spec.size when that is set. What stops it is a sourceProblem; err is a
// failed read only.
func (r *GoldenImageReconciler) resolveSource(ctx context.Context, gi *thinlvmv1.GoldenImage) (*thinlvmv1.SourceVolumeStatus, *sourceProblem, error) {
	var (
		name    string
		role    thinlvmv1.VolumeRole
		what    string
		problem *sourceProblem
		err     error
	)
	switch src := gi.Spec.Source; {
	case src.PVC != nil:
		role, what = thinlvmv1.RoleVolume, "claim "+claimKey(src.PVC)
		name, problem, err = r.claimVolume(ctx, src.PVC)
	case src.VolumeSnapshot != nil:
		role, what = thinlvmv1.RoleSnapshot, "VolumeSnapshot "+claimKey(src.VolumeSnapshot)
		name, problem, err = r.snapshotVolume(ctx, src.VolumeSnapshot)
	default:
		return nil, nil, nil
	}
	if problem != nil || err != nil {
		return nil, problem, err
	}
	lv := &thinlvmv1.LogicalVolume{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, lv); apierrors.IsNotFound(err) {
		return nil, notReady("LogicalVolume %s of %s not found", name, what), nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("get LogicalVolume %s: %w", name, err)
	}
	got := lv.Spec.Role
	if got == "" {
		got = thinlvmv1.RoleVolume // the default of objects older than the field
	}
	if got != role {
		return nil, invalid("LogicalVolume %s of %s is a %s, not a %s", name, what, got, role), nil
	}
	if !lv.DeletionTimestamp.IsZero() {
		return nil, invalid("LogicalVolume %s of %s is being deleted", name, what), nil
	}
	if !meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) {
		return nil, notReady("LogicalVolume %s of %s is not Ready", name, what), nil
	}
	// The LV's size: the spec's, or more where lvm rounded it up to whole
	// extents.
	size := lv.Spec.Size.DeepCopy()
	if c := lv.Status.CurrentSize; c != nil && c.Cmp(size) > 0 {
		size = c.DeepCopy()
	}
	if !gi.Spec.Size.IsZero() && gi.Spec.Size.Cmp(size) < 0 {
		return nil, invalid("spec.size %s is smaller than %s, whose volume is %s", gi.Spec.Size.String(), what, size.String()), nil
	}
	if p := r.checkDeviceClass(ctx, gi, lv, what); p != nil {
		return nil, p, nil
	}
	return &thinlvmv1.SourceVolumeStatus{LogicalVolume: lv.Name, NodeName: lv.Spec.NodeName, Size: size}, nil, nil
}

// checkDeviceClass refuses a source in another thin pool than the image's
// device class: the base is a thin snapshot of the source, so it lives in
// the source's pool. An empty class is the node's default, which the
// node's LVMNode tells; without it, only two different names are refused
// here and the node agent checks the rest.
func (r *GoldenImageReconciler) checkDeviceClass(ctx context.Context, gi *thinlvmv1.GoldenImage, lv *thinlvmv1.LogicalVolume, what string) *sourceProblem {
	want, got := gi.Spec.DeviceClass, lv.Spec.DeviceClass
	if want == got {
		return nil
	}
	// Told apart by the node's report of both classes, else by their
	// names when both are named.
	same := want == "" || got == ""
	node := &thinlvmv1.LVMNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: lv.Spec.NodeName}, node); err == nil {
		if a, b := node.Status.DeviceClass(want), node.Status.DeviceClass(got); a != nil && b != nil {
			same = a == b
		}
	}
	if same {
		return nil
	}
	return invalid("spec.deviceClass %q is not the device class of %s (%q on node %s): the base is made in the source's thin pool",
		want, what, got, lv.Spec.NodeName)
}

// claimVolume is the LogicalVolume name of a bound thinlvm claim: its PV's
// CSI volume handle.
func (r *GoldenImageReconciler) claimVolume(ctx context.Context, src *thinlvmv1.ClaimSource) (string, *sourceProblem, error) {
	key := claimKey(src)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: src.Namespace, Name: src.Name}, pvc); apierrors.IsNotFound(err) {
		return "", notReady("claim %s not found", key), nil
	} else if err != nil {
		return "", nil, fmt.Errorf("get claim %s: %w", key, err)
	}
	if class := ptr.Deref(pvc.Spec.StorageClassName, ""); class != "" {
		sc := &storagev1.StorageClass{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Name: class}, sc)
		switch {
		case err == nil && sc.Provisioner != thinlvmv1.DriverName:
			return "", invalid("claim %s is of StorageClass %s, whose provisioner is %s, not %s", key, class, sc.Provisioner, thinlvmv1.DriverName), nil
		case err != nil && !apierrors.IsNotFound(err):
			return "", nil, fmt.Errorf("get StorageClass %s: %w", class, err)
		}
		// A class deleted since: the PV tells whose volume it is.
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", notReady("claim %s is not bound", key), nil
	}
	pv := &corev1.PersistentVolume{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); apierrors.IsNotFound(err) {
		return "", notReady("PersistentVolume %s of claim %s not found", pvc.Spec.VolumeName, key), nil
	} else if err != nil {
		return "", nil, fmt.Errorf("get PersistentVolume %s: %w", pvc.Spec.VolumeName, err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != thinlvmv1.DriverName || pv.Spec.CSI.VolumeHandle == "" {
		return "", invalid("claim %s is bound to PersistentVolume %s, which is not a %s volume", key, pv.Name, thinlvmv1.DriverName), nil
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return "", notReady("PersistentVolume %s is not bound to claim %s", pv.Name, key), nil
	}
	return pv.Spec.CSI.VolumeHandle, nil, nil
}

// snapshotVolume is the LogicalVolume name of a thinlvm VolumeSnapshot
// ready to use: its content's snapshot handle.
func (r *GoldenImageReconciler) snapshotVolume(ctx context.Context, src *thinlvmv1.ClaimSource) (string, *sourceProblem, error) {
	key := claimKey(src)
	vs := &unstructured.Unstructured{}
	vs.SetGroupVersionKind(volumeSnapshotGVK)
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: src.Namespace, Name: src.Name}, vs); meta.IsNoMatchError(err) {
		return "", notReady("the API server serves no %s VolumeSnapshots", volumeSnapshotGVK.GroupVersion()), nil
	} else if apierrors.IsNotFound(err) {
		return "", notReady("VolumeSnapshot %s not found", key), nil
	} else if err != nil {
		return "", nil, fmt.Errorf("get VolumeSnapshot %s: %w", key, err)
	}
	ready, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse")
	contentName, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	if !ready || contentName == "" {
		return "", notReady("VolumeSnapshot %s is not ready to use", key), nil
	}
	content := &unstructured.Unstructured{}
	content.SetGroupVersionKind(volumeSnapshotContentGVK)
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: contentName}, content); apierrors.IsNotFound(err) {
		return "", notReady("VolumeSnapshotContent %s of VolumeSnapshot %s not found", contentName, key), nil
	} else if err != nil {
		return "", nil, fmt.Errorf("get VolumeSnapshotContent %s: %w", contentName, err)
	}
	if driver, _, _ := unstructured.NestedString(content.Object, "spec", "driver"); driver != thinlvmv1.DriverName {
		return "", invalid("VolumeSnapshot %s is bound to VolumeSnapshotContent %s of driver %s, not %s", key, contentName, driver, thinlvmv1.DriverName), nil
	}
	if uid, _, _ := unstructured.NestedString(content.Object, "spec", "volumeSnapshotRef", "uid"); types.UID(uid) != vs.GetUID() {
		return "", notReady("VolumeSnapshotContent %s is not bound to VolumeSnapshot %s", contentName, key), nil
	}
	handle, _, _ := unstructured.NestedString(content.Object, "status", "snapshotHandle")
	if handle == "" {
		return "", notReady("VolumeSnapshotContent %s of VolumeSnapshot %s has no snapshot handle yet", contentName, key), nil
	}
	return handle, nil, nil
}
