package golden_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/diskimage"
	"github.com/thinlvm/thinlvm/node/golden"
	"github.com/thinlvm/thinlvm/node/transfer/transfertest"
)

// peer is the second node of the peer tests; both nodes have peerLabel.
const (
	peer      = "gn2"
	peerLabel = "peer-test"
)

// serveTransfer runs n's transfer endpoint over l on loopback and
// publishes it in n's LVMNode.
func serveTransfer(t *testing.T, n string, l *lvmdtest.LVMD) {
	t.Helper()
	ctx := context.Background()
	ep := transfertest.Serve(t, n, k8s, l)
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: n}, ln); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ln.DeepCopy())
	ln.Status.Transfer = ep
	if err := k8s.Status().Patch(ctx, ln, patch); err != nil {
		t.Fatal(err)
	}
}

// startPeer runs the second node's golden reconciler, over its own lvmd,
// with copies from peers on, until the test ends.
func startPeer(t *testing.T) *lvmdtest.LVMD {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, stop, err := lvmdtest.Run(lvmdtest.Options{DevDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: peer, Labels: map[string]string{peerLabel: "yes"}}}, &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: peer}}} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Scheme: scheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}}) // the first node's reconciler has the name
	if err != nil {
		t.Fatal(err)
	}
	if err := (&golden.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), LVMD: l, NodeName: peer,
		Writer: &diskimage.Writer{Attempts: 1}, RetryAfter: time.Hour, ProgressInterval: 50 * time.Millisecond,
		Copier: transfertest.Copier(peer, mgr.GetAPIReader()), Namespace: "default", WaitInterval: 100 * time.Millisecond}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		stop()
		for _, o := range []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: peer}}, &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: peer}}} {
			_ = k8s.Delete(context.Background(), o)
		}
	})
	return l
}

// origin serves img over HTTP on loopback until the test ends, counting
// the downloads.
func origin(t *testing.T, img []byte) (url string, served *atomic.Int32) {
	t.Helper()
	served = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		http.ServeContent(w, r, "img", time.Unix(1e9, 0), bytes.NewReader(img))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/img", served
}

// deleteImage deletes gi and waits until none of nodes lists its base.
func deleteImage(t *testing.T, gi *thinlvmv1.GoldenImage, nodes ...string) {
	t.Helper()
	if err := k8s.Delete(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the bases of "+gi.Name+" removed", func() bool {
		for _, n := range nodes {
			if _, ok := baseOn(n, gi.Name); ok {
				return false
			}
		}
		return true
	})
}

// labelNode gives the first node peerLabel.
func labelNode(t *testing.T) {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels[peerLabel] = "yes"
	if err := k8s.Patch(context.Background(), n, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := client.MergeFrom(n.DeepCopy())
		delete(n.Labels, peerLabel)
		_ = k8s.Patch(context.Background(), n, patch)
	})
}

// baseOn is node n's entry for image in its LVMNode.
func baseOn(n, image string) (thinlvmv1.GoldenBaseStatus, bool) {
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: n}, ln); err != nil {
		return thinlvmv1.GoldenBaseStatus{}, false
	}
	for _, b := range ln.Status.GoldenBases {
		if b.Name == image {
			return b, true
		}
	}
	return thinlvmv1.GoldenBaseStatus{}, false
}

func ready(n, image string) bool {
	b, ok := baseOn(n, image)
	return ok && b.State == thinlvmv1.GoldenBaseReady
}

// holders sets the GoldenImage's status.nodes, as the controller does.
func holders(t *testing.T, image string, nodes ...string) {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: image}, gi); err != nil {
		t.Fatal(err)
	}
	gi.Status.Nodes = nodes
	if err := k8s.Status().Update(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
}

// Two nodes prewarm one image at once: one holds the image's Lease and
// downloads it, the other waits and copies the base from it. The origin
// serves it once; both bases hold the image and publish one checksum.
func TestBaseFromPeer(t *testing.T) {
	ctx := context.Background()
	img := bytes.Repeat([]byte("peer base\n"), 100<<10) // ~1 MiB
	url, served := origin(t, img)
	labelNode(t)
	l2 := startPeer(t)
	serveTransfer(t, node, lvmd)
	serveTransfer(t, peer, l2)

	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "peered"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sum(img)}},
		Size:   resource.MustParse("2Mi"),
		Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: peerLabel, Operator: metav1.LabelSelectorOpExists}}}}}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	var first, second string
	testutil.Eventually(t, "a base Ready", func() bool {
		switch {
		case ready(node, gi.Name):
			first, second = node, peer
		case ready(peer, gi.Name):
			first, second = peer, node
		}
		return first != ""
	})
	holders(t, gi.Name, first)
	testutil.Eventually(t, "the second base Ready", func() bool { return ready(second, gi.Name) })
	a, _ := baseOn(first, gi.Name)
	b, _ := baseOn(second, gi.Name)
	if a.From != thinlvmv1.BaseFromOrigin || b.From != first {
		t.Errorf("bases came from %q and %q, want %q and %q", a.From, b.From, thinlvmv1.BaseFromOrigin, first)
	}
	if a.ContentSHA256 == "" || a.ContentSHA256 != b.ContentSHA256 {
		t.Errorf("content checksums %q and %q, want one", a.ContentSHA256, b.ContentSHA256)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("the origin served the image %d times, want once", n)
	}
	base := thinlvmv1.BaseLVName(gi)
	for n, l := range map[string]*lvmdtest.LVMD{node: lvmd, peer: l2} {
		got := l.Data(t, base)
		if len(got) < 2<<20 || !bytes.Equal(got[:len(img)], img) || !bytes.Equal(got[len(img):], make([]byte, len(got)-len(img))) {
			t.Errorf("%s: the base does not hold the image (%d bytes)", n, len(got))
		}
	}
	// The serving node's transfer snapshot is gone once the copy closed.
	for n, l := range map[string]*lvmdtest.LVMD{node: lvmd, peer: l2} {
		resp, err := l.ListLVs(ctx, &pb.ListLVsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range resp.GetVolumes() {
			if strings.HasPrefix(v.GetName(), "tx-") {
				t.Errorf("%s: transfer snapshot %s left", n, v.GetName())
			}
		}
	}
	deleteImage(t, gi, node, peer)
}

// An image taken from a volume: its node makes the base a thin snapshot of
// the volume (its later writes stay out of the base), and another node
// copies the base from there.
func TestBaseFromVolume(t *testing.T) {
	ctx := context.Background()
	l2 := startPeer(t)
	serveTransfer(t, node, lvmd)
	serveTransfer(t, peer, l2)
	const src = "src-vol"
	resp, err := lvmd.CreateLV(ctx, &pb.CreateLVRequest{Name: thinlvmv1.LVNameOf(src), SizeBytes: 4 << 20, Tags: []string{thinlvmv1.OwnerTagPrefix + src}})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("volume data\n"), 200<<10)[:2<<20]
	if err := os.WriteFile(resp.GetVolume().GetDevicePath(), data, 0); err != nil {
		t.Fatal(err)
	}
	before := counter(t, "thinlvm_node_golden_bases_made_total", "from", "volume")
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "from-volume"}, Spec: thinlvmv1.GoldenImageSpec{
		Source:  thinlvmv1.ImageSource{PVC: &thinlvmv1.ClaimSource{Namespace: "default", Name: "golden-src"}},
		Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{peerLabel: "yes"}}}}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	gi.Status.SourceVolume = &thinlvmv1.SourceVolumeStatus{LogicalVolume: src, NodeName: node, Size: *resource.NewQuantity(4<<20, resource.BinarySI)}
	if err := k8s.Status().Update(ctx, gi); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the base on the volume's node", func() bool { return ready(node, gi.Name) })
	if err := os.WriteFile(resp.GetVolume().GetDevicePath(), bytes.Repeat([]byte{'x'}, 1<<20), 0); err != nil {
		t.Fatal(err) // after the base: not in it
	}
	holders(t, gi.Name, node)
	testutil.Eventually(t, "the copy on the peer", func() bool { return ready(peer, gi.Name) })
	a, _ := baseOn(node, gi.Name)
	b, _ := baseOn(peer, gi.Name)
	if a.From != thinlvmv1.BaseFromVolume || b.From != node || a.ContentSHA256 == "" || a.ContentSHA256 != b.ContentSHA256 {
		t.Errorf("bases %+v and %+v: want from %q and %q with one checksum", a, b, thinlvmv1.BaseFromVolume, node)
	}
	if got := counter(t, "thinlvm_node_golden_bases_made_total", "from", "volume"); got != before+1 {
		t.Errorf("thinlvm_node_golden_bases_made_total{from=volume} is %v, was %v", got, before)
	}
	base := thinlvmv1.BaseLVName(gi)
	for n, l := range map[string]*lvmdtest.LVMD{node: lvmd, peer: l2} {
		if got := l.Data(t, base); len(got) != 4<<20 || !bytes.Equal(got[:len(data)], data) {
			t.Errorf("%s: the base does not hold the volume's data as it was", n)
		}
	}
	deleteImage(t, gi, node, peer)
	if _, err := lvmd.RemoveLV(ctx, &pb.RemoveLVRequest{Name: thinlvmv1.LVNameOf(src)}); err != nil {
		t.Fatal(err)
	}
}

// A node whose peers cannot serve (here one that publishes no endpoint)
// downloads from the origin after three failed copies.
func TestPeersFailThenOrigin(t *testing.T) {
	ctx := context.Background()
	img := bytes.Repeat([]byte("fallback\n"), 50<<10)
	url, served := origin(t, img)
	startPeer(t)
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "fallback"}, Spec: thinlvmv1.GoldenImageSpec{
		Source:  thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sum(img)}},
		Size:    resource.MustParse("1Mi"),
		Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fallback": "yes"}}}}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	holders(t, gi.Name, "ghost")
	n := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: peer}, n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels["fallback"] = "yes"
	if err := k8s.Patch(ctx, n, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the base from the origin", func() bool { return ready(peer, gi.Name) })
	if b, _ := baseOn(peer, gi.Name); b.From != thinlvmv1.BaseFromOrigin || served.Load() != 1 {
		t.Errorf("base from %q after %d downloads, want from the origin once", b.From, served.Load())
	}
	deleteImage(t, gi, peer)
}

// A peer whose base no longer hashes as it publishes (a disk that rotted):
// each copy fails its checksum and is removed, and after three the node
// downloads from the origin.
func TestCorruptPeerBaseThenOrigin(t *testing.T) {
	ctx := context.Background()
	img := bytes.Repeat([]byte("rotting\n"), 64<<10)
	url, served := origin(t, img)
	labelNode(t)
	l2 := startPeer(t)
	serveTransfer(t, node, lvmd)
	// The first node only, at first.
	n2 := &corev1.Node{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: peer}, n2); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n2.DeepCopy())
	delete(n2.Labels, peerLabel)
	if err := k8s.Patch(ctx, n2, patch); err != nil {
		t.Fatal(err)
	}
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "rotting"}, Spec: thinlvmv1.GoldenImageSpec{
		Source:  thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sum(img)}},
		Size:    resource.MustParse("1Mi"),
		Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{peerLabel: "yes"}}}}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the first node's base", func() bool { return ready(node, gi.Name) })
	// Rot: the sealed base's bytes change under its published checksum.
	got, err := lvmd.GetLV(ctx, &pb.GetLVRequest{Name: thinlvmv1.BaseLVName(gi)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(got.GetVolume().GetDevicePath(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XYZ"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	holders(t, gi.Name, node)
	patch = client.MergeFrom(n2.DeepCopy())
	n2.Labels = map[string]string{peerLabel: "yes"}
	if err := k8s.Patch(ctx, n2, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the peer's base", func() bool { return ready(peer, gi.Name) })
	b, _ := baseOn(peer, gi.Name)
	if b.From != thinlvmv1.BaseFromOrigin || served.Load() != 2 {
		t.Errorf("the peer's base is from %q after %d downloads, want from the origin, the second download", b.From, served.Load())
	}
	if data := l2.Data(t, thinlvmv1.BaseLVName(gi)); !bytes.Equal(data[:len(img)], img) {
		t.Error("the peer's base does not hold the image")
	}
	deleteImage(t, gi, node, peer)
}

// The origin Lease: the first node takes it; another finds it held while
// its holder renews it, and takes it once it expired (its holder died).
func TestOriginLease(t *testing.T) {
	ctx := context.Background()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "leased"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/img", SHA256: strings.Repeat("0", 64)}},
		Size:   resource.MustParse("1Mi")}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, gi) })
	agent := func(n string) *golden.Reconciler {
		return &golden.Reconciler{Client: k8s, APIReader: k8s, NodeName: n, Namespace: "default", LeaseDuration: time.Second}
	}
	for _, tt := range []struct {
		node, holder string
		sleep        time.Duration
	}{
		{node: "a", holder: "a"},
		{node: "b", holder: "a"},                         // held
		{node: "a", holder: "a"},                         // its own: renewed
		{node: "b", holder: "b", sleep: 2 * time.Second}, // expired: taken
	} {
		time.Sleep(tt.sleep)
		holder, err := golden.TakeLease(agent(tt.node), ctx, gi)
		if err != nil || holder != tt.holder {
			t.Fatalf("node %s takes the Lease: holder %q, %v; want %q", tt.node, holder, err, tt.holder)
		}
	}
}
