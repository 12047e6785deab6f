package images_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// The suite's two real-LVM nodes, each its own VM with VG vg0 and thin
// pool pool0; BenchmarkPrewarm's further nodes are named vm-node-3, ...
const (
	nodeA = cluster.VMNode
	nodeB = "vm-node-2"
)

const (
	mib = int64(1) << 20
	// imageSize and imageData: the suite's images are 64 MiB, of which the
	// first 16 MiB are random (the rest reads as zeros), as e2e/migration's.
	imageSize = 64 * mib
	imageData = 16 * mib
)

var (
	tb  *cluster.Testbed
	ctx = context.Background()

	vmNodes = flag.Int("images.nodes", 2, "real-LVM nodes (VMs of 2 GiB each) to start; the tests use two, BenchmarkPrewarm all")
)

// TestMain starts the test bed with its real-LVM nodes and no simulated
// ones.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if *vmNodes < 2 {
		fmt.Fprintf(os.Stderr, "FAIL: -images.nodes=%d: the suite needs at least 2\n", *vmNodes)
		return 1
	}
	start, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	nodes := []string{nodeA, nodeB}
	for i := 3; i <= *vmNodes; i++ {
		nodes = append(nodes, fmt.Sprintf("vm-node-%d", i))
	}
	var err error
	tb, err = cluster.StartTestbed(start, cluster.TestbedOptions{Log: os.Stderr, VMNodes: nodes, VMDisk: "16G", Pool: "8G"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer tb.Stop()
	code := m.Run()
	if code != 0 {
		tb.DumpLogs(os.Stderr)
	}
	return code
}

// diskImage is a raw disk image of size bytes whose first data bytes are
// random from seed, the rest zeros.
func diskImage(seed uint64, size, data int64) []byte {
	img := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range data {
		img[i] = byte(r.Uint32())
	}
	return img
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// contentDigest is a base's contentSHA256 of the bytes b, by its
// definition: the SHA-256 of the SHA-256 digests of b's 4 MiB chunks.
func contentDigest(b []byte) string {
	outer := sha256.New()
	for off := 0; off < len(b); off += 4 << 20 {
		s := sha256.Sum256(b[off:min(off+4<<20, len(b))])
		outer.Write(s[:])
	}
	return hex.EncodeToString(outer.Sum(nil))
}

// xxh64Hex is the checksum lvmvm.VM.Checksum computes in the guest.
func xxh64Hex(b []byte) string { return fmt.Sprintf("%016x", xxhash.Sum64(b)) }

// onNodes is a prewarm of the named nodes.
func onNodes(nodes ...string) *thinlvmv1.Prewarm {
	return &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: nodes}}}}
}

// httpImage is a GoldenImage of a raw image served by an origin, of the
// suite's image size.
func httpImage(name, url string, img []byte, prewarm *thinlvmv1.Prewarm) *thinlvmv1.GoldenImage {
	return &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sha256Hex(img)}},
		Format: thinlvmv1.FormatRaw, Size: *resource.NewQuantity(int64(len(img)), resource.BinarySI), Prewarm: prewarm}}
}

// fromRef is a claim's dataSourceRef to a thinlvm kind.
func fromRef(kind, name string) *corev1.TypedObjectReference {
	return &corev1.TypedObjectReference{APIGroup: ptr.To(thinlvmv1.GroupVersion.Group), Kind: kind, Name: name}
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	if err := tb.CreateAll(ctx, objs...); err != nil {
		t.Fatal(err)
	}
}

// deleteAndWait deletes the objects and waits until they are gone.
func deleteAndWait(t testing.TB, objs ...client.Object) {
	t.Helper()
	if err := tb.DeleteAndWait(ctx, 3*time.Minute, objs...); err != nil {
		t.Error(err)
	}
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	if err := tb.WaitFor(ctx, what, timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// disk creates a VM disk (a Block claim and a pod using it, on node) whose
// claim has dataSourceRef ref, and returns both for deleteAndWait.
func disk(t testing.TB, name, class, size, node string, ref *corev1.TypedObjectReference) []client.Object {
	t.Helper()
	c, p := cluster.Disk(name, class, size, node)
	c.Spec.DataSourceRef = ref
	create(t, c, p)
	return []client.Object{p, c}
}

func bound(t testing.TB, name string) *cluster.Volume {
	t.Helper()
	v, err := tb.WaitBound(ctx, "default", name, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checksum is the XXH64 of a whole LV of a node, computed in its VM.
func checksum(t testing.TB, node, lv string) string {
	t.Helper()
	sum, err := tb.LVChecksum(ctx, node, lv)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func getImage(t testing.TB, name string) *thinlvmv1.GoldenImage {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: name}, gi); err != nil {
		t.Fatal(err)
	}
	return gi
}

// baseOn is the LVMNode entry of an image's base on a node, nil when the
// node lists none.
func baseOn(node, image string) (*thinlvmv1.GoldenBaseStatus, error) {
	ln := &thinlvmv1.LVMNode{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
		return nil, err
	}
	for i, b := range ln.Status.GoldenBases {
		if b.Name == image {
			return &ln.Status.GoldenBases[i], nil
		}
	}
	return nil, nil
}

// readyBase waits until a node's base of an image is Ready and returns its
// LVMNode entry; a Failed base fails the test.
func readyBase(t testing.TB, node, image string) thinlvmv1.GoldenBaseStatus {
	t.Helper()
	var got *thinlvmv1.GoldenBaseStatus
	err := tb.WaitFor(ctx, "the base of "+image+" Ready on "+node, 10*time.Minute, func() (bool, error) {
		var err error
		if got, err = baseOn(node, image); err != nil || got == nil {
			return false, err
		}
		if got.State == thinlvmv1.GoldenBaseFailed {
			return false, fmt.Errorf("the base of %s on %s failed: %s", image, node, got.Message)
		}
		return got.State == thinlvmv1.GoldenBaseReady, nil
	})
	if err != nil {
		gi := &thinlvmv1.GoldenImage{}
		gerr := tb.Client.Get(ctx, types.NamespacedName{Name: image}, gi)
		t.Fatalf("%v\nlast LVMNode entry: %+v\nGoldenImage status: %+v (%v)", err, got, gi.Status, gerr)
	}
	return *got
}

// waitImage waits until cond holds for a GoldenImage and returns it; on
// timeout it fails the test with the image's last status.
func waitImage(t testing.TB, image, what string, timeout time.Duration, cond func(*thinlvmv1.GoldenImage) bool) *thinlvmv1.GoldenImage {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{}
	err := tb.WaitFor(ctx, "GoldenImage "+image+": "+what, timeout, func() (bool, error) {
		err := tb.Client.Get(ctx, types.NamespacedName{Name: image}, gi)
		return err == nil && cond(gi), err
	})
	if err != nil {
		t.Fatalf("%v\nlast status: %+v", err, gi.Status)
	}
	return gi
}

// readyNodes checks that a GoldenImage's status comes to list exactly the
// nodes as Ready (after their bases are).
func readyNodes(t testing.TB, image string, nodes ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(nodes))
	gi := &thinlvmv1.GoldenImage{}
	err := tb.WaitFor(ctx, fmt.Sprintf("GoldenImage %s to list %v Ready", image, want), 3*time.Minute, func() (bool, error) {
		err := tb.Client.Get(ctx, types.NamespacedName{Name: image}, gi)
		return err == nil && gi.Status.ReadyNodes == int32(len(want)) && slices.Equal(gi.Status.Nodes, want), err
	})
	if err != nil {
		t.Errorf("%v\n%s", err, tb.ImageState(ctx, image))
	}
}

// basesGone waits until no node lists a base of the image and no VM holds
// its LV.
func basesGone(t testing.TB, image *thinlvmv1.GoldenImage) {
	t.Helper()
	lv := thinlvmv1.BaseLVName(image)
	waitFor(t, "the bases of "+image.Name+" removed", 3*time.Minute, func() (bool, error) {
		for node, vm := range tb.VMs {
			b, err := baseOn(node, image.Name)
			if err != nil || b != nil {
				return false, err
			}
			lvs, err := vm.LVS(ctx, "vg0", "lv_tags")
			if err != nil {
				return false, err
			}
			if _, ok := lvs[lv]; ok {
				return false, nil
			}
		}
		return true, nil
	})
}

// lvGone waits until a volume's LV is gone from its node's VG.
func lvGone(t testing.TB, node, lv string) {
	t.Helper()
	waitFor(t, "LV "+lv+" removed from "+node, 3*time.Minute, func() (bool, error) {
		lvs, err := tb.VMs[node].LVS(ctx, "vg0", "lv_tags")
		_, ok := lvs[lv]
		return err == nil && !ok, err
	})
}
