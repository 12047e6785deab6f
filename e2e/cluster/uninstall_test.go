package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// uninstall is the suite's last act, after every test passed: it removes
// thinlvm as docs/uninstall.md says and checks that nothing is left behind:
// no LogicalVolume, no thinlvm CRD, no finalizer on any Node, no LV tagged
// thinlvm in the VM.
func uninstall(ctx context.Context) error {
	// 1. Release the volumes while thinlvm runs.
	for _, kind := range []client.Object{&corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
		if err := k.Client.DeleteAllOf(ctx, kind, client.InNamespace("default")); err != nil {
			return fmt.Errorf("delete the tests' %T: %w", kind, err)
		}
	}
	snaps := &unstructured.Unstructured{}
	snaps.SetGroupVersionKind(schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"})
	if err := k.Client.DeleteAllOf(ctx, snaps, client.InNamespace("default")); err != nil && !meta.IsNoMatchError(err) {
		return fmt.Errorf("delete VolumeSnapshots: %w", err)
	}
	if err := k.Client.DeleteAllOf(ctx, &thinlvmv1.GoldenImage{}); err != nil {
		return fmt.Errorf("delete GoldenImages: %w", err)
	}
	if err := poll(ctx, 5*time.Minute, "every LogicalVolume to go", func() (bool, error) {
		lvs := &thinlvmv1.LogicalVolumeList{}
		if err := k.Client.List(ctx, lvs); err != nil {
			return false, err
		}
		return len(lvs.Items) == 0, nil
	}); err != nil {
		return err
	}
	if err := poll(ctx, 3*time.Minute, "the VM's agent to remove every thinlvm LV (volumes and golden bases)", func() (bool, error) {
		left, err := thinlvmLVs(ctx)
		return len(left) == 0, err
	}); err != nil {
		return err
	}

	// 2. Remove thinlvm.
	if err := k.Uninstall(ctx); err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, "the LogicalVolume CRD to go", func() (bool, error) {
		err := k.Client.List(ctx, &thinlvmv1.LogicalVolumeList{})
		return apierrors.IsNotFound(err) || meta.IsNoMatchError(err), nil
	}); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := k.Client.List(ctx, nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		for _, f := range n.Finalizers {
			if strings.Contains(f, "thinlvm") {
				return fmt.Errorf("node %s keeps finalizer %s after uninstalling", n.Name, f)
			}
		}
	}
	left, err := thinlvmLVs(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("LVs %v are left in the VM after uninstalling", left)
	}
	return nil
}

// thinlvmLVs are the LVs in the VM that carry lvmd's tag.
func thinlvmLVs(ctx context.Context) ([]string, error) {
	lvs, err := vm.LVS(ctx, "vg0", "lv_tags")
	if err != nil {
		return nil, err
	}
	var out []string
	for name, f := range lvs {
		if len(f) > 0 && strings.Contains(","+f[0]+",", ",thinlvm,") {
			out = append(out, name)
		}
	}
	return out, nil
}

// poll calls cond until it is true, fails or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
