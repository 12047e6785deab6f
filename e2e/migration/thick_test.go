package migration_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// A thick device class on both nodes: a VM disk is a linear LV; a
// VolumeSnapshot of it is refused and nothing is made; a clone on its own
// node and `kubectl thinlvm move` to the other node copy every extent
// (Mapped), read through a transient copy-on-write snapshot; the bytes are
// identical and nothing is left behind.
func TestThickMove(t *testing.T) {
	const class = "move-thick"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), Parameters: map[string]string{thinlvmv1.DeviceClassParameter: thickDeviceClass}}
	if err := tb.Client.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Client.Delete(ctx, sc) })

	disk(t, "thick-src", class, "128Mi", nodeA, nil)
	src := bound(t, "thick-src", 3*time.Minute)
	if attr := lvField(t, nodeA, src.Status.VolumeID, "lv_attr"); !strings.HasPrefix(attr, "-wi-a") {
		t.Fatalf("the disk's lv_attr is %q, want a linear LV", attr)
	}
	write(t, nodeA, src.Status.VolumeID, 0, 32)
	want := checksum(t, nodeA, src.Status.VolumeID)

	// A snapshot is refused before anything is made.
	snap := cluster.VolumeSnapshot("thick-snap", "thick-src")
	if err := tb.Client.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	var msg string
	if err := tb.WaitFor(ctx, "the snapshot's error", 3*time.Minute, func() (bool, error) {
		if err := tb.Client.Get(ctx, client.ObjectKeyFromObject(snap), snap); err != nil {
			return false, err
		}
		msg, _, _ = unstructured.NestedString(snap.Object, "status", "error", "message")
		return msg != "", nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "thick volumes have no snapshots") {
		t.Errorf("the snapshot's error %q does not say thick volumes have no snapshots", msg)
	}
	list := &thinlvmv1.LogicalVolumeList{}
	if err := tb.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	for _, lv := range list.Items {
		if lv.Spec.Role == thinlvmv1.RoleSnapshot {
			t.Errorf("LogicalVolume %s made for a refused snapshot", lv.Name)
		}
	}
	if err := tb.Client.Delete(ctx, snap); err != nil {
		t.Error(err)
	}

	// A clone on the same node: copied through the node's own endpoint.
	disk(t, "thick-clone", class, "128Mi", nodeA, fromClaim("thick-src"))
	clone := bound(t, "thick-clone", 5*time.Minute)
	if st := clone.Status.Transfer; clone.Spec.NodeName != nodeA || st == nil || st.Mode != thinlvmv1.TransferMapped || st.BytesDone != 128*mib {
		t.Fatalf("clone on %s with transfer %+v: want a Mapped copy of all 128 MiB on %s", clone.Spec.NodeName, st, nodeA)
	}
	if got := checksum(t, nodeA, clone.Status.VolumeID); got != want {
		t.Errorf("the clone's checksum %s differs from the source's %s", got, want)
	}

	// The disk moved to the other node with the plugin.
	deletePod(t, "thick-src")
	if out, err := kubectlThinLVM(t, "move", "thick-src", "--to", nodeB, "--timeout", "5m"); err != nil {
		t.Fatalf("move: %v\n%s", err, out)
	}
	moved := bound(t, "thick-src", time.Minute)
	if st := moved.Status.Transfer; moved.Spec.NodeName != nodeB || st == nil || st.Mode != thinlvmv1.TransferMapped || st.SourceNode != nodeA {
		t.Fatalf("moved volume on %s with transfer %+v: want a Mapped copy from %s on %s", moved.Spec.NodeName, st, nodeA, nodeB)
	}
	if attr := lvField(t, nodeB, moved.Status.VolumeID, "lv_attr"); !strings.HasPrefix(attr, "-wi-a") {
		t.Errorf("the moved disk's lv_attr is %q, want a linear LV", attr)
	}
	if got := checksum(t, nodeB, moved.Status.VolumeID); got != want {
		t.Errorf("the moved disk's checksum %s differs from the source's %s", got, want)
	}
	if err := tb.WaitFor(ctx, "the old LV to go", 2*time.Minute, func() (bool, error) {
		return !hasLV(t, nodeA, src.Status.VolumeID), nil
	}); err != nil {
		t.Error(err)
	}
	remove(t, "thick-clone", "thick-src") // waits for no LV but the bases: no transfer snapshot left either
}
