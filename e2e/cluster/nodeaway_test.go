package cluster_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func nodeReady(name string) (bool, error) {
	n := &corev1.Node{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		return false, err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

// A node that goes NotReady (its kubelet frozen, so its heartbeats stop,
// and thinlvm's containers frozen with it; the Node object kept) loses
// nothing: its volumes and their objects stay while it is away, a claim
// deleted meanwhile waits for it, and when it returns its data reads back
// the same, the deleted claim's LV goes (once the kubelet has released
// the volume of the pod deleted meanwhile) and it serves new claims.
func TestNodeNotReadyAndBack(t *testing.T) {
	create(t, pvc("away-data", blockClass, "256Mi", true), pod("away-data", true, onNode(vmNode), "away-data"),
		pvc("away-gone", blockClass, "64Mi", true), pod("away-gone", true, onNode(vmNode), "away-gone"))
	dataLV, goneLV := lvOf(t, "away-data"), lvOf(t, "away-gone")
	_, dataPV := bound(t, "away-data")
	_, gonePV := bound(t, "away-gone")
	pattern := make([]byte, 4<<20)
	if _, err := rand.Read(pattern); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), "away-pattern"), pattern, 0o644); err != nil {
		t.Fatal(err)
	}
	inGuest(t, "dd", "if=/share/away-pattern", "of=/dev/vg0/"+dataLV, "bs=1M", "oflag=direct", "conv=fsync", "status=none")
	readBack := func() string {
		t.Helper()
		inGuest(t, "lvm", "lvchange", "-ay", "vg0/"+dataLV)
		inGuest(t, "dd", "if=/dev/vg0/"+dataLV, "of=/share/away-read", "bs=1M", "count=4", "iflag=direct", "status=none")
		b, err := os.ReadFile(filepath.Join(vm.ShareDir(), "away-read"))
		if err != nil {
			t.Fatal(err)
		}
		return sum(b)
	}
	want := sum(pattern)
	if got := readBack(); got != want {
		t.Fatalf("pattern read back %s, wrote %s", got, want)
	}

	// The node goes away.
	kubelet := guestPID(t, "kubelet")
	var frozen []string
	for _, name := range []string{"thinlvm-node", "lvmd"} {
		id, _ := pluginContainer(t, name)
		frozen = append(frozen, id)
	}
	back := func() {
		for _, id := range frozen {
			ctr(t, "task", "resume", id)
		}
		inGuest(t, "kill", "-CONT", kubelet)
	}
	returned := false
	defer func() { // whatever happens, the node serves the next tests
		if !returned {
			back()
		}
	}()
	inGuest(t, "kill", "-STOP", kubelet)
	for _, id := range frozen {
		ctr(t, "task", "pause", id)
	}
	away := time.Now()
	waitFor(t, "the node NotReady", 3*time.Minute, func() (bool, error) {
		ready, err := nodeReady(vmNode)
		return !ready, err
	})
	t.Logf("node NotReady %v after its kubelet stopped", time.Since(away).Round(time.Second))
	// A claim deleted while the node is away waits for it. Its pod goes
	// as an operator removes one from an unreachable node: forced.
	if err := k.Client.Delete(ctx, pod("away-gone", true, nil), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	gone(t, pod("away-gone", true, nil))
	if err := k.Client.Delete(ctx, pvc("away-gone", "", "64Mi", true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted claim's LogicalVolume to wait for its node", 2*time.Minute, func() (bool, error) {
		lv := &thinlvmv1.LogicalVolume{}
		err := k.Client.Get(ctx, types.NamespacedName{Name: gonePV.Spec.CSI.VolumeHandle}, lv)
		return err == nil && lv.DeletionTimestamp != nil, client.IgnoreNotFound(err)
	})
	time.Sleep(20 * time.Second) // the node stays away a while longer
	// Nothing of what the node holds was deleted.
	lv := logicalVolume(t, dataPV.Spec.CSI.VolumeHandle)
	if lv.DeletionTimestamp != nil {
		t.Errorf("the LogicalVolume of a node that is only away is being deleted")
	}
	pv := &corev1.PersistentVolume{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: dataPV.Name}, pv); err != nil || pv.DeletionTimestamp != nil || pv.Status.Phase != corev1.VolumeBound {
		t.Errorf("PV of away-data while the node is away: %v, phase %s", err, pv.Status.Phase)
	}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: vmNode}, &thinlvmv1.LVMNode{}); err != nil {
		t.Errorf("LVMNode while the node is away: %v", err)
	}
	if out := inGuest(t, "lvm", "lvs", "--noheadings", "-o", "lv_name", "vg0"); !strings.Contains(out, goneLV) || !strings.Contains(out, dataLV) {
		t.Errorf("LVs on the node while its agent is away: %s", out)
	}

	// It comes back.
	returned = true
	back()
	backAt := time.Now()
	waitFor(t, "the node Ready again", 3*time.Minute, func() (bool, error) { return nodeReady(vmNode) })
	waitFor(t, "the deleted claim's LogicalVolume gone", 3*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, types.NamespacedName{Name: gonePV.Spec.CSI.VolumeHandle}, &thinlvmv1.LogicalVolume{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	t.Logf("the LV deleted while away went %v after the node returned", time.Since(backAt).Round(100*time.Millisecond))
	if out := inGuest(t, "lvm", "lvs", "--noheadings", "-o", "lv_name", "vg0"); strings.Contains(out, goneLV) {
		t.Errorf("LV %s of the claim deleted while away is still on the node", goneLV)
	}
	if got := readBack(); got != want {
		t.Errorf("after the node returned, away-data reads %s, wrote %s", got, want)
	}
	create(t, pvc("away-new", blockClass, "64Mi", true), pod("away-new", true, onNode(vmNode), "away-new"))
	bound(t, "away-new")
	deleteAll(t, pod("away-data", true, nil), pod("away-new", true, nil), pvc("away-data", "", "1Gi", true), pvc("away-new", "", "1Gi", true))
	gone(t, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: dataPV.Spec.CSI.VolumeHandle}})
}
