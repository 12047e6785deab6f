package migration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

// The two real-LVM nodes: each its own VM, VG vg0 and thin pool pool0 (and
// a thick device class in vg0).
const (
	nodeA = cluster.VMNode
	nodeB = "vm-node-2"
)

// deviceClasses are the nodes' device classes: the chart's thin ssd, and
// a thick class from vg0's free extents beside its pool (TestThickMove).
var deviceClasses = []map[string]any{
	{"name": "ssd", "volumeGroup": "vg0", "thinPool": "pool0", "default": true, "overprovisionRatio": 4},
	{"name": thickDeviceClass, "type": "thick", "volumeGroup": "vg0", "spareGB": 1},
}

const thickDeviceClass = "thick"

// The StorageClasses of VM disks: sharedClass's image has its base on both
// nodes, aloneClass's only on nodeA.
const (
	sharedClass = "move-shared"
	aloneClass  = "move-alone"
)

const (
	mib = int64(1) << 20
	// imageData is how much of the 64 MiB golden images is data (the rest
	// reads as zeros and is not mapped in a base).
	imageData = 16 * mib
	// written is what the clone tests write into a 1 GiB source disk: the
	// inter-VM copy runs at a few MB/s on the emulated CPUs, so the large
	// sizes are make bench's (BenchmarkMove).
	written = 64 * mib
)

var (
	tb  *cluster.Testbed
	ctx = context.Background()
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	start, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	var err error
	tb, err = cluster.StartTestbed(start, cluster.TestbedOptions{Log: os.Stderr, VMNodes: []string{nodeA, nodeB}, VMDisk: "24G", Pool: "14G",
		DeviceClasses: deviceClasses})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer tb.Stop()
	srv, err := goldenImages(start)
	if err != nil {
		tb.DumpLogs(os.Stderr)
		fmt.Fprintf(os.Stderr, "FAIL: golden images: %v\n", err)
		return 1
	}
	defer srv.Close()
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr)
	}
	return code
}

// goldenImages serves two 64 MiB raw images from this machine and makes
// their GoldenImages and classes: sharedClass's prewarmed on both nodes,
// aloneClass's on nodeA only. It returns once the bases are Ready.
func goldenImages(ctx context.Context) (*imageserver.Server, error) {
	img := make([]byte, 64*mib)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range imageData {
		img[i] = byte(r.Uint32())
	}
	srv := imageserver.New()
	url := srv.Add("/image.raw", img)
	for _, c := range []struct {
		class string
		nodes []string
	}{{sharedClass, []string{nodeA, nodeB}}, {aloneClass, []string{nodeA}}} {
		gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: c.class}, Spec: thinlvmv1.GoldenImageSpec{
			Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: imageserver.SHA256(img)}},
			Format: thinlvmv1.FormatRaw, Size: resource.MustParse("64Mi"),
			Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: c.nodes}}}}}}
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.class}, Provisioner: thinlvmv1.DriverName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), Parameters: map[string]string{thinlvmv1.GoldenImageParameter: gi.Name}}
		for _, o := range []client.Object{gi, sc} {
			if err := tb.Client.Create(ctx, o); err != nil {
				srv.Close()
				return nil, err
			}
		}
		begin := time.Now()
		err := tb.WaitFor(ctx, "the bases of "+gi.Name, 10*time.Minute, func() (bool, error) {
			got := &thinlvmv1.GoldenImage{}
			err := tb.Client.Get(ctx, client.ObjectKeyFromObject(gi), got)
			return err == nil && got.Status.ReadyNodes == int32(len(c.nodes)), err
		})
		if err != nil {
			srv.Close()
			return nil, fmt.Errorf("%w\n%s", err, tb.ImageState(ctx, gi.Name))
		}
		fmt.Fprintf(os.Stderr, "the bases of %s Ready on %v in %s\n", gi.Name, c.nodes, time.Since(begin).Round(time.Second))
	}
	return srv, nil
}

// disk makes a raw block claim of class and a pod using it; with node set,
// the pod is pinned there.
func disk(t testing.TB, name, class, size, node string, source *corev1.TypedLocalObjectReference) {
	t.Helper()
	c := cluster.Claim(name, class, size, true)
	c.Spec.DataSource = source
	var aff *corev1.Affinity
	if node != "" {
		aff = cluster.OnNode(node)
	}
	for _, o := range []client.Object{c, cluster.Pod(name, true, aff, name)} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
}

func fromClaim(name string) *corev1.TypedLocalObjectReference {
	return &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: name}
}

// bound waits until the claim is bound and returns its LogicalVolume.
func bound(t testing.TB, name string, timeout time.Duration) *thinlvmv1.LogicalVolume {
	t.Helper()
	c := &corev1.PersistentVolumeClaim{}
	err := tb.WaitFor(ctx, "claim "+name+" to bind", timeout, func() (bool, error) {
		err := tb.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, c)
		return err == nil && c.Status.Phase == corev1.ClaimBound, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: c.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	return logicalVolume(t, pv.Spec.CSI.VolumeHandle)
}

func logicalVolume(t testing.TB, name string) *thinlvmv1.LogicalVolume {
	t.Helper()
	lv := &thinlvmv1.LogicalVolume{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: name}, lv); err != nil {
		t.Fatal(err)
	}
	return lv
}

// inVM runs argv on a node's VM.
func inVM(t testing.TB, node string, argv ...string) string {
	t.Helper()
	out, err := tb.VMs[node].Run(ctx, argv...)
	if err != nil {
		t.Fatalf("%s: %v: %v", node, argv, err)
	}
	return out
}

// write fills n MiB of an LV from offset off MiB with random bytes.
func write(t testing.TB, node, lv string, off, n int64) {
	t.Helper()
	inVM(t, node, "dd", "if=/dev/urandom", "of=/dev/vg0/"+lv, "bs=1M", fmt.Sprintf("seek=%d", off), fmt.Sprintf("count=%d", n),
		"oflag=direct", "conv=fsync,notrunc", "status=none")
}

// checksum is the XXH64 of the whole device of an LV, computed in its VM.
func checksum(t testing.TB, node, lv string) string {
	t.Helper()
	sum, n, err := tb.VMs[node].Checksum(ctx, "/dev/vg0/"+lv)
	if err != nil || n == 0 {
		t.Fatalf("checksum of %s on %s: %v (%d bytes)", lv, node, err, n)
	}
	return sum
}

// lvField is one lvs field of an LV on a node.
func lvField(t testing.TB, node, lv, field string) string {
	t.Helper()
	return strings.TrimSpace(inVM(t, node, "lvm", "lvs", "--noheadings", "-o", field, "vg0/"+lv))
}

// dataUsed is a node's thin pool's data in use.
func dataUsed(t testing.TB, node string) int64 {
	t.Helper()
	ln := &thinlvmv1.LVMNode{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
		t.Fatal(err)
	}
	return ln.Status.DeviceClasses[0].DataUsed.Value()
}

// waitPoolSettled waits until a node's LVMNode shows the pool's use after
// the last writes: two reports a publish interval apart agree.
func waitPoolSettled(t testing.TB, node string) int64 {
	t.Helper()
	last := int64(-1)
	var got int64
	if err := tb.WaitFor(ctx, node+"'s pool use to settle", time.Minute, func() (bool, error) {
		got = dataUsed(t, node)
		same := got == last
		last = got
		time.Sleep(2 * time.Second)
		return same, nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// remove deletes claims and their pods and waits until their LVs are gone
// from both nodes (and no transfer snapshot is left on either).
func remove(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		for _, o := range []client.Object{
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default"}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default"}},
		} {
			if err := tb.Client.Delete(ctx, o, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Error(err)
			}
		}
	}
	noLeftovers(t)
}

// noLeftovers waits until both nodes hold only golden bases.
func noLeftovers(t testing.TB) {
	t.Helper()
	err := tb.WaitFor(ctx, "the nodes to hold only their golden bases", 3*time.Minute, func() (bool, error) {
		for _, node := range []string{nodeA, nodeB} {
			lvs, err := tb.VMs[node].LVS(ctx, "vg0", "lv_tags")
			if err != nil {
				return false, err
			}
			for name := range lvs {
				if name != "pool0" && !strings.HasPrefix(name, "gi-") {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// claimEvents are the reasons of the Events on a claim.
func claimEvents(t testing.TB, name string) map[string]bool {
	t.Helper()
	events := &corev1.EventList{}
	if err := tb.Client.List(ctx, events, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == name {
			out[e.Reason] = true
		}
	}
	return out
}

// A 1 GiB VM disk with 64 MiB written, cloned to the other node holding
// the same golden base: a thin snapshot of that node's base receiving the
// 64 MiB only, byte-identical to the source. (make bench moves 4 GiB disks
// with 5, 25 and 100% written.)
func TestCloneToANodeWithTheSameBase(t *testing.T) {
	disk(t, "shared-src", sharedClass, "1Gi", nodeA, nil)
	src := bound(t, "shared-src", 3*time.Minute)
	write(t, nodeA, src.Status.VolumeID, 512, written/mib)
	want := checksum(t, nodeA, src.Status.VolumeID)

	disk(t, "shared-copy", sharedClass, "1Gi", nodeB, fromClaim("shared-src"))
	lv := bound(t, "shared-copy", 5*time.Minute)
	if lv.Spec.NodeName != nodeB {
		t.Fatalf("the clone is on %s, want %s", lv.Spec.NodeName, nodeB)
	}
	st := lv.Status.Transfer
	if st == nil || st.Mode != thinlvmv1.TransferDelta || st.SourceNode != nodeA || st.Base != sharedClass {
		t.Fatalf("transfer %+v, want a Delta copy from %s against %s", st, nodeA, sharedClass)
	}
	t.Logf("delta copy: %d bytes copied, %d sent, %d bytes/s", st.BytesDone, st.BytesSent, st.BytesPerSecond)
	if st.BytesDone < written || float64(st.BytesSent) > 1.1*float64(written) {
		t.Errorf("copied %d bytes and sent %d for %d written: want at least the written data and at most 1.1x it on the wire", st.BytesDone, st.BytesSent, written)
	}
	if got := checksum(t, nodeB, lv.Status.VolumeID); got != want {
		t.Errorf("the clone's checksum %s differs from the source's %s", got, want)
	}
	base := lvField(t, nodeB, lv.Status.VolumeID, "origin")
	if !strings.HasPrefix(base, "gi-") {
		t.Errorf("the clone's origin on %s is %q, want the golden base", nodeB, base)
	}
	if ev := claimEvents(t, "shared-copy"); !ev["CopyingFromNode"] || !ev["CopiedFromNode"] {
		t.Errorf("the claim's Events %v lack CopyingFromNode and CopiedFromNode", ev)
	}
	remove(t, "shared-copy", "shared-src")
}

// Without a shared base the clone is a plain thin LV that receives what
// the source maps: identical, and the target pool grows by about that, not
// by the disk's size.
func TestCloneWithoutASharedBase(t *testing.T) {
	disk(t, "alone-src", aloneClass, "1Gi", nodeA, nil)
	src := bound(t, "alone-src", 3*time.Minute)
	write(t, nodeA, src.Status.VolumeID, 256, written/mib)
	want := checksum(t, nodeA, src.Status.VolumeID)
	before := waitPoolSettled(t, nodeB)

	disk(t, "alone-copy", aloneClass, "1Gi", nodeB, fromClaim("alone-src"))
	lv := bound(t, "alone-copy", 5*time.Minute)
	st := lv.Status.Transfer
	if st == nil || st.Mode != thinlvmv1.TransferMapped || st.SourceNode != nodeA {
		t.Fatalf("transfer %+v, want a Mapped copy from %s", st, nodeA)
	}
	mapped := imageData + written
	t.Logf("mapped copy: %d bytes copied, %d sent", st.BytesDone, st.BytesSent)
	if st.BytesDone < mapped || float64(st.BytesDone) > 1.1*float64(mapped) {
		t.Errorf("copied %d bytes, want about the source's mapped %d", st.BytesDone, mapped)
	}
	if got := checksum(t, nodeB, lv.Status.VolumeID); got != want {
		t.Errorf("the clone's checksum %s differs from the source's %s", got, want)
	}
	grown := waitPoolSettled(t, nodeB) - before
	if grown < mapped*9/10 || grown > mapped*11/10 {
		t.Errorf("%s's pool grew by %d bytes, want about the source's mapped %d (the disk is 1 GiB)", nodeB, grown, mapped)
	}
	if origin := lvField(t, nodeB, lv.Status.VolumeID, "origin"); origin != "" {
		t.Errorf("the clone has origin %q, want none", origin)
	}
	remove(t, "alone-copy", "alone-src")
}
