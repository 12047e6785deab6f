package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// Volume is a bound claim with its PersistentVolume and LogicalVolume.
type Volume struct {
	Claim *corev1.PersistentVolumeClaim
	PV    *corev1.PersistentVolume
	LV    *thinlvmv1.LogicalVolume
}

// Disk is a raw block claim in "default" and a pod using it, pinned to
// node unless node is empty: a VM disk and its virt-launcher.
func Disk(name, class, size, node string) (*corev1.PersistentVolumeClaim, *corev1.Pod) {
	var aff *corev1.Affinity
	if node != "" {
		aff = OnNode(node)
	}
	return Claim(name, class, size, true), Pod(name, true, aff, name)
}

// CreateAll creates the objects in order.
func (cp *ControlPlane) CreateAll(ctx context.Context, objs ...client.Object) error {
	for _, o := range objs {
		if err := cp.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// WaitBound waits until a claim is Bound and returns it with its PV and
// LogicalVolume.
func (cp *ControlPlane) WaitBound(ctx context.Context, namespace, name string, timeout time.Duration) (*Volume, error) {
	v := &Volume{Claim: &corev1.PersistentVolumeClaim{}, PV: &corev1.PersistentVolume{}, LV: &thinlvmv1.LogicalVolume{}}
	err := cp.WaitFor(ctx, "claim "+namespace+"/"+name+" to bind", timeout, func() (bool, error) {
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, v.Claim)
		return err == nil && v.Claim.Status.Phase == corev1.ClaimBound, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, err
	}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: v.Claim.Spec.VolumeName}, v.PV); err != nil {
		return nil, fmt.Errorf("PV of claim %s/%s: %w", namespace, name, err)
	}
	if v.PV.Spec.CSI == nil {
		return nil, fmt.Errorf("PV %s of claim %s/%s is not a CSI volume", v.PV.Name, namespace, name)
	}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: v.PV.Spec.CSI.VolumeHandle}, v.LV); err != nil {
		return nil, fmt.Errorf("LogicalVolume of claim %s/%s: %w", namespace, name, err)
	}
	return v, nil
}

// DeleteAndWait deletes the objects (without a grace period; absent ones
// are fine) and waits until every one is gone.
func (cp *ControlPlane) DeleteAndWait(ctx context.Context, timeout time.Duration, objs ...client.Object) error {
	for _, o := range objs {
		if err := cp.Client.Delete(ctx, o, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %T %s: %w", o, o.GetName(), err)
		}
	}
	return cp.WaitGone(ctx, timeout, objs...)
}

// WaitGone waits until every object is gone from the API server.
func (cp *ControlPlane) WaitGone(ctx context.Context, timeout time.Duration, objs ...client.Object) error {
	for _, o := range objs {
		err := cp.WaitFor(ctx, fmt.Sprintf("%T %s to be gone", o, o.GetName()), timeout, func() (bool, error) {
			err := cp.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
