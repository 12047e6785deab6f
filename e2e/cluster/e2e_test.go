package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

var (
	tb  *cluster.Testbed
	k   *cluster.Cluster
	vm  *lvmvm.VM
	ctx = context.Background()
)

const (
	storageClass = cluster.FilesystemClass
	blockClass   = cluster.BlockClass
	vmNode       = cluster.VMNode
)

// TestMain starts the control plane, thinlvm, two fake nodes and a real
// node on real lvm2 in the VM: its kubelet, containerd and runc run
// thinlvm's node pod from deploy/ and the tests' pods there
// (realnode_test.go has what the real kubelet must show).
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The test bed's bound, a guard against a hang: on a fresh machine it
	// first builds the kubelet, containerd, runc, agnhost and e2e.test
	// (about 20 minutes cold), beside the other lane's suites; one such
	// start, under more load, was killed at 30.
	start, cancel := context.WithTimeout(ctx, 45*time.Minute)
	defer cancel()
	var err error
	tb, err = cluster.StartTestbed(start, cluster.TestbedOptions{Log: os.Stderr, Nodes: []string{"node-a", "node-b"}, VMDisk: "16G", Pool: "12G", RealNode: true, StorageSuite: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer tb.Stop()
	k, vm = tb.Cluster, tb.VM
	code := m.Run()
	if code != 0 {
		dumpLogs()
		return code
	}
	// The last act: uninstalling leaves nothing behind (docs/uninstall.md).
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Minute)
	defer ucancel()
	if err := uninstall(uctx); err != nil {
		dumpLogs()
		fmt.Fprintf(os.Stderr, "FAIL: uninstall: %v\n", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "uninstall: no LogicalVolume, CRD, Node finalizer or thinlvm LV left")
	return 0
}

func dumpLogs() { tb.DumpLogs(os.Stderr) }

// The suite's objects: claims and pods in "default", pods through the
// thinlvm scheduler.
var (
	pvc    = cluster.Claim
	pod    = cluster.Pod
	onNode = cluster.OnNode
)

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	if err := k.WaitFor(ctx, what, timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// bound waits until the claim is Bound and returns it with its PV.
func bound(t testing.TB, name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	c := &corev1.PersistentVolumeClaim{}
	waitFor(t, "PVC "+name+" to bind", 3*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, c)
		return err == nil && c.Status.Phase == corev1.ClaimBound, client.IgnoreNotFound(err)
	})
	pv := &corev1.PersistentVolume{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: c.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	return c, pv
}

// pvNode is the node a PV's node affinity pins it to.
func pvNode(pv *corev1.PersistentVolume) string {
	return pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]
}

func running(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	waitFor(t, "pod "+name+" to run", 5*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, p)
		return err == nil && p.Status.Phase == corev1.PodRunning, client.IgnoreNotFound(err)
	})
	return p
}

func logicalVolume(t testing.TB, name string) *thinlvmv1.LogicalVolume {
	t.Helper()
	lv := &thinlvmv1.LogicalVolume{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: name}, lv); err != nil {
		t.Fatalf("LogicalVolume %s: %v", name, err)
	}
	return lv
}

// gone waits until obj is deleted. A pod on the real node goes once its
// kubelet has finished starting it (a pod deleted while ContainerCreating
// is first set up), stopped its container and unmapped its volumes: on a
// loaded CI machine, four block pods deleted at once took over two
// minutes in the TCG guest. A pod that does not go fails with its status,
// events, the kubelet's lines about it and the node's state.
func gone(t testing.TB, obj client.Object) {
	t.Helper()
	timeout := 3 * time.Minute
	pod, isPod := obj.(*corev1.Pod)
	if isPod {
		timeout = 6 * time.Minute
	}
	err := k.WaitFor(ctx, fmt.Sprintf("%T %s to be deleted", obj, obj.GetName()), timeout, func() (bool, error) {
		err := k.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	switch {
	case err == nil:
	case isPod && pod.Spec.NodeName == vmNode:
		t.Fatalf("%v; status %+v; events %s\n=== the kubelet's last lines about it\n%s%s", err, pod.Status, events(pod), kubeletLines(string(pod.UID), pod.Name), guestState())
	default:
		t.Fatal(err)
	}
}

func deleteAll(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		gone(t, o)
	}
}

func TestFilesystemAndBlockVolumes(t *testing.T) {
	create(t, pvc("fs-data", storageClass, "1Gi", false), pvc("blk-disk", blockClass, "2Gi", true),
		pod("fs-pod", false, nil, "fs-data"), pod("blk-pod", true, nil, "blk-disk"))
	for _, tc := range []struct{ pod, claim string }{{"fs-pod", "fs-data"}, {"blk-pod", "blk-disk"}} {
		p := running(t, tc.pod)
		_, pv := bound(t, tc.claim)
		if got := pvNode(pv); got != p.Spec.NodeName {
			t.Errorf("%s: PV on node %s, pod on %s", tc.claim, got, p.Spec.NodeName)
		}
		lv := logicalVolume(t, pv.Spec.CSI.VolumeHandle)
		if lv.Spec.NodeName != p.Spec.NodeName || !meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) {
			t.Errorf("%s: LogicalVolume %+v", tc.claim, lv.Status)
		}
	}
	_, pv := bound(t, "blk-disk")
	if *pv.Spec.VolumeMode != corev1.PersistentVolumeBlock || pv.Spec.CSI.FSType != "" && pv.Spec.CSI.FSType != "ext4" {
		t.Errorf("block PV: mode %v fstype %q", *pv.Spec.VolumeMode, pv.Spec.CSI.FSType)
	}
	_, fsPV := bound(t, "fs-data")
	if fsPV.Spec.CSI.FSType != "xfs" {
		t.Errorf("filesystem PV fstype %q, want xfs (from the StorageClass)", fsPV.Spec.CSI.FSType)
	}

	// Expansion of a bound claim grows the LV.
	c, _ := bound(t, "fs-data")
	c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
	if err := k.Client.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the LV to grow to 3Gi", 2*time.Minute, func() (bool, error) {
		lv := &thinlvmv1.LogicalVolume{}
		err := k.Client.Get(ctx, types.NamespacedName{Name: fsPV.Spec.CSI.VolumeHandle}, lv)
		return err == nil && lv.Status.CurrentSize != nil && lv.Status.CurrentSize.Cmp(resource.MustParse("3Gi")) == 0, err
	})
	waitFor(t, "the PV to show 3Gi", time.Minute, func() (bool, error) {
		pv := &corev1.PersistentVolume{}
		err := k.Client.Get(ctx, types.NamespacedName{Name: fsPV.Name}, pv)
		return err == nil && pv.Spec.Capacity.Storage().Cmp(resource.MustParse("3Gi")) == 0, err
	})

	// Deleting the claim removes the LV.
	deleteAll(t, pod("fs-pod", false, nil), pod("blk-pod", true, nil), pvc("fs-data", "", "1Gi", false), pvc("blk-disk", "", "1Gi", true))
	gone(t, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: fsPV.Spec.CSI.VolumeHandle}})
	gone(t, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: pv.Spec.CSI.VolumeHandle}})
}

// On the VM node the volume is a real LV; a snapshot and a claim restored
// from it land on the same node, where the restore is an O(1) thin
// snapshot (e2e/migration moves them between nodes).
func TestSnapshotAndRestoreOnTheVMNode(t *testing.T) {
	create(t, pvc("origin", storageClass, "1Gi", false), pod("origin-pod", false, onNode(vmNode), "origin"))
	running(t, "origin-pod")
	_, pv := bound(t, "origin")
	if pvNode(pv) != vmNode {
		t.Fatalf("origin on %s", pvNode(pv))
	}
	snap := cluster.VolumeSnapshot("origin-snap", "origin")
	create(t, snap)
	waitFor(t, "the snapshot to be ready", 3*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, client.ObjectKeyFromObject(snap), snap)
		ready, _, _ := unstructured.NestedBool(snap.Object, "status", "readyToUse")
		return err == nil && ready, err
	})
	restore := func(name string) *corev1.PersistentVolumeClaim {
		c := pvc(name, storageClass, "2Gi", false)
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "origin-snap"}
		return c
	}
	// The ThinLVM scheduler plugin places the restore's pod on the source's
	// node by itself.
	restored := restore("restored")
	create(t, restored, pod("restored-pod", false, nil, "restored"))
	p := running(t, "restored-pod")
	_, rpv := bound(t, "restored")
	if pvNode(rpv) != vmNode || p.Spec.NodeName != vmNode {
		t.Errorf("restored claim on %s, its pod on %s: want both on the source's node %s", pvNode(rpv), p.Spec.NodeName, vmNode)
	}
	lv := logicalVolume(t, rpv.Spec.CSI.VolumeHandle)
	if lv.Spec.Source == nil || lv.Spec.Source.Kind != thinlvmv1.SourceSnapshot || lv.Status.CurrentSize.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("restored LogicalVolume %+v / %+v", lv.Spec, lv.Status)
	}
	// They are real LVs in the VM, and go with their claims.
	lvsInVM := func() string {
		out, err := vm.Run(ctx, "lvm", "lvs", "--noheadings", "-o", "lv_name", "vg0")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, id := range []string{pv.Spec.CSI.VolumeHandle, rpv.Spec.CSI.VolumeHandle} {
		if !strings.Contains(lvsInVM(), id) {
			t.Errorf("LV %s is not in the VM", id)
		}
	}
	deleteAll(t, pod("restored-pod", false, nil), pod("origin-pod", false, nil), restored, snap, pvc("origin", "", "1Gi", false))
	waitFor(t, "the LVs to leave the VM", time.Minute, func() (bool, error) {
		out := lvsInVM()
		return !strings.Contains(out, pv.Spec.CSI.VolumeHandle) && !strings.Contains(out, rpv.Spec.CSI.VolumeHandle), nil
	})
}

// Deleting a Node deletes the claims bound to its volumes and its
// LogicalVolumes; when the node comes back with its disks, its agent
// removes the LVs whose objects went meanwhile.
func TestNodeDeletionCleansUp(t *testing.T) {
	if err := k.AddNode(ctx, cluster.Node{Name: "node-doomed"}); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitLVMNode(ctx, "node-doomed"); err != nil {
		t.Fatal(err)
	}
	create(t, pvc("doomed-data", storageClass, "1Gi", false), pod("doomed-pod", false, onNode("node-doomed"), "doomed-data"))
	running(t, "doomed-pod")
	_, pv := bound(t, "doomed-data")
	node := &corev1.Node{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: "node-doomed"}, node); err != nil {
		t.Fatal(err)
	}
	if len(node.Finalizers) != 0 {
		t.Errorf("node finalizers %v: thinlvm holds no Node (uninstalling it must leave none)", node.Finalizers)
	}
	k.Kill(k.NodeProcess("node-doomed", "thinlvm-node"))
	k.Kill(k.NodeProcess("node-doomed", "lvmd"))
	if err := k.Client.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	gone(t, node)
	gone(t, &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: pv.Spec.CSI.VolumeHandle}})
	claim := pvc("doomed-data", "", "1Gi", false)
	waitFor(t, "the claim to be deleted", 2*time.Minute, func() (bool, error) {
		err := k.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim)
		return apierrors.IsNotFound(err) || err == nil && !claim.DeletionTimestamp.IsZero(), client.IgnoreNotFound(err)
	})
	_ = k.Client.Delete(ctx, pod("doomed-pod", false, nil))

	// The node comes back under the same name with its disks intact: its
	// agent finds the LV whose LogicalVolume went while it was away,
	// removes it and says so on its LVMNode.
	if lvs, err := k.FakeLVs("node-doomed"); err != nil || !slices.Contains(lvs, pv.Spec.CSI.VolumeHandle) {
		t.Fatalf("the gone node's disk should still hold LV %s: %v %v", pv.Spec.CSI.VolumeHandle, lvs, err)
	}
	waitFor(t, "the gone node's pods to be collected", 3*time.Minute, func() (bool, error) {
		pods := &corev1.PodList{}
		err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace))
		for _, p := range pods.Items {
			if p.Spec.NodeName == "node-doomed" {
				return false, err
			}
		}
		return true, err
	})
	if err := k.AddNode(ctx, cluster.Node{Name: "node-doomed"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the returned agent to remove the orphan LV and report it", 2*time.Minute, func() (bool, error) {
		lvs, err := k.FakeLVs("node-doomed")
		if err != nil || slices.Contains(lvs, pv.Spec.CSI.VolumeHandle) {
			return false, err
		}
		events := &corev1.EventList{}
		if err := k.Client.List(ctx, events); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "OrphanLVRemoved" && e.InvolvedObject.Kind == "LVMNode" && e.InvolvedObject.Name == "node-doomed" &&
				strings.Contains(e.Message, pv.Spec.CSI.VolumeHandle) {
				return true, nil
			}
		}
		return false, nil
	})
	k.Kill(k.NodeProcess("node-doomed", "thinlvm-node"))
	k.Kill(k.NodeProcess("node-doomed", "lvmd"))
	if err := k.Client.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// A node whose pool is full refuses the volume (ResourceExhausted, by lvm
// itself), the provisioner gives the claim back to the scheduler (it drops
// the selected-node annotation), and the claim lands on the other node.
func TestExhaustionReschedules(t *testing.T) {
	for _, n := range []string{"node-full", "node-spare"} {
		if err := k.AddNode(ctx, cluster.Node{Name: n, Labels: map[string]string{"exhaust": "true"}}); err != nil {
			t.Fatal(err)
		}
		if err := k.WaitLVMNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		if err := k.WaitCapacity(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.FillFakePool("node-full"); err != nil {
		t.Fatal(err)
	}
	// The scheduler's choice of node-full, made while its capacity still
	// looked fine: the annotation is what the scheduler writes.
	claim := pvc("squeezed", storageClass, "1Gi", false)
	claim.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "node-full"}
	create(t, claim)
	waitFor(t, "node-full to refuse the claim and the provisioner to give it back", 2*time.Minute, func() (bool, error) {
		events := &corev1.EventList{}
		if err := k.Client.List(ctx, events, client.InNamespace("default")); err != nil {
			return false, err
		}
		refused := false
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "squeezed" && e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, "ResourceExhausted") {
				refused = true
			}
		}
		c := &corev1.PersistentVolumeClaim{}
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(claim), c); err != nil {
			return false, err
		}
		_, selected := c.Annotations["volume.kubernetes.io/selected-node"]
		return refused && !selected, nil
	})
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "exhaust", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}}},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-full"}}}}}},
	}}
	create(t, pod("squeezed-pod", false, affinity, "squeezed"))
	p := running(t, "squeezed-pod")
	_, pv := bound(t, "squeezed")
	if pvNode(pv) != "node-spare" || p.Spec.NodeName != "node-spare" {
		t.Errorf("claim on %s, pod on %s: want node-spare", pvNode(pv), p.Spec.NodeName)
	}
	deleteAll(t, pod("squeezed-pod", false, nil), pvc("squeezed", "", "1Gi", false))
}
