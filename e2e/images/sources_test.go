package images_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"log"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// containerDisk is a KubeVirt container-disk image of a raw disk: one
// layer holding it as disk/disk.img, owned by qemu (107), as KubeVirt's
// images are built.
func containerDisk(t testing.TB, disk []byte) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	at := time.Unix(1e9, 0)
	err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "disk/", Mode: 0o555, Uid: 107, Gid: 107, ModTime: at})
	if err == nil {
		err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "disk/disk.img", Mode: 0o444, Uid: 107, Gid: 107, ModTime: at, Size: int64(len(disk))})
	}
	if err == nil {
		_, err = tw.Write(disk)
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// A GoldenImage whose source is a container-disk image in an OCI registry
// (go-containerregistry's, served over TLS with a CA of its own that a
// ConfigMap gives the agents), pinned by digest and prewarmed on nodeA:
// nodeA's base is Ready, from the origin, and holds the disk byte for byte.
func TestRegistrySource(t *testing.T) {
	t.Parallel()
	srv, caPEM, err := cluster.StartHostTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	host := net.JoinHostPort(lvmvm.HostAddress, port)
	// The VMs reach the registry. Their busybox wget cannot handshake
	// with Go's TLS server (its TLS 1.2 hello has no signature_algorithms),
	// so it asks in plain HTTP, which Go's TLS server answers with a 400.
	for _, node := range []string{nodeA, nodeB} {
		out, err := tb.VMs[node].Run(ctx, "wget", "-q", "-O", "-", "http://"+host+"/v2/")
		if err == nil || !strings.Contains(err.Error(), "400 Bad Request") {
			t.Fatalf("the registry from %s: %v (%q), want the TLS server's 400 to a plain HTTP request", node, err, out)
		}
	}

	raw := diskImage(11, imageSize, imageData)
	img := containerDisk(t, raw)
	ref, err := name.ParseReference("127.0.0.1:" + port + "/kubevirt/fedora:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ca := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "images-registry-ca", Namespace: cluster.Namespace},
		Data: map[string]string{"ca.crt": string(caPEM)}}
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "registry-disk"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{Registry: &thinlvmv1.RegistrySource{Image: host + "/kubevirt/fedora@" + digest.String(), CAConfigMap: ca.Name}},
		Format: thinlvmv1.FormatRaw, Size: *resource.NewQuantity(imageSize, resource.BinarySI), Prewarm: onNodes(nodeA)}}
	create(t, ca, gi)
	defer deleteAndWait(t, gi, ca)

	base := readyBase(t, nodeA, gi.Name)
	readyNodes(t, gi.Name, nodeA)
	if base.From != thinlvmv1.BaseFromOrigin {
		t.Errorf("the base on %s is from %q, want %q", nodeA, base.From, thinlvmv1.BaseFromOrigin)
	}
	if want := contentDigest(raw); base.ContentSHA256 != want {
		t.Errorf("the base's contentSHA256 is %q, want the disk's %s", base.ContentSHA256, want)
	}
	if got, want := checksum(t, nodeA, base.LV), xxh64Hex(raw); got != want {
		t.Errorf("the base's XXH64 in the VM is %s, want the disk's %s", got, want)
	}
	if b, err := baseOn(nodeB, gi.Name); err != nil || b != nil {
		t.Errorf("%s, not prewarmed, lists a base %+v (%v)", nodeB, b, err)
	}
}

// A GoldenImage prewarmed on both nodes: one node downloads it from the
// origin, the other copies that node's base; the origin serves it once and
// both bases hold the same bytes.
func TestPeersShareOneDownload(t *testing.T) {
	t.Parallel()
	o := imageserver.Start(t)
	raw := diskImage(21, imageSize, imageData)
	gi := httpImage("peers-disk", o.Add("/peers.raw", raw), raw, onNodes(nodeA, nodeB))
	create(t, gi)
	defer deleteAndWait(t, gi)

	a, b := readyBase(t, nodeA, gi.Name), readyBase(t, nodeB, gi.Name)
	readyNodes(t, gi.Name, nodeA, nodeB)
	if n, served := o.Downloads("/peers.raw"); n != 1 {
		t.Errorf("the origin served %d downloads (%d bytes), want 1", n, served)
	}
	froms := []string{a.From, b.From}
	if !slices.Equal(froms, []string{thinlvmv1.BaseFromOrigin, nodeA}) && !slices.Equal(froms, []string{nodeB, thinlvmv1.BaseFromOrigin}) {
		t.Errorf("the bases on %s and %s are from %q, want one from %q and the other from that node", nodeA, nodeB, froms, thinlvmv1.BaseFromOrigin)
	}
	if want := contentDigest(raw); a.ContentSHA256 != want || b.ContentSHA256 != want {
		t.Errorf("the bases' contentSHA256 are %q and %q, want both the image's %s", a.ContentSHA256, b.ContentSHA256, want)
	}
	sa, sb := checksum(t, nodeA, a.LV), checksum(t, nodeB, b.LV)
	if want := xxh64Hex(raw); sa != want || sb != want {
		t.Errorf("the bases' XXH64 in the VMs are %s and %s, want both the image's %s", sa, sb, want)
	}
}

// A GoldenImage taken from a claim's volume on nodeA and prewarmed on
// nodeB: the controller resolves the volume; nodeA's base is a snapshot of
// it, nodeB's a copy of nodeA's base; both hold the volume as it was when
// nodeA's base was made, not what was written after.
func TestPVCSource(t *testing.T) {
	t.Parallel()
	objs := disk(t, "pvc-source", cluster.BlockClass, "64Mi", nodeA, nil)
	defer deleteAndWait(t, objs...)
	src := bound(t, "pvc-source")
	lv := src.LV.Status.VolumeID
	if err := tb.WriteRandom(ctx, nodeA, lv, 0, imageData/mib); err != nil {
		t.Fatal(err)
	}
	before := checksum(t, nodeA, lv)

	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "pvc-disk"}, Spec: thinlvmv1.GoldenImageSpec{
		Source:  thinlvmv1.ImageSource{PVC: &thinlvmv1.ClaimSource{Namespace: "default", Name: "pvc-source"}},
		Prewarm: onNodes(nodeB)}}
	create(t, gi)
	defer deleteAndWait(t, gi)
	resolved := waitImage(t, gi.Name, "its source volume resolved", 3*time.Minute, func(gi *thinlvmv1.GoldenImage) bool {
		return gi.Status.SourceVolume != nil
	})
	if sv := resolved.Status.SourceVolume; sv.LogicalVolume != src.LV.Name || sv.NodeName != nodeA || sv.Size.Value() != 64*mib {
		t.Errorf("source volume %+v, want LogicalVolume %s on %s of 64Mi", sv, src.LV.Name, nodeA)
	}
	a := readyBase(t, nodeA, gi.Name)
	if a.From != thinlvmv1.BaseFromVolume {
		t.Errorf("the base on %s is from %q, want %q", nodeA, a.From, thinlvmv1.BaseFromVolume)
	}
	// Writes to the volume after its base is made stay out of the bases.
	if err := tb.WriteRandom(ctx, nodeA, lv, imageData/mib, imageData/mib); err != nil {
		t.Fatal(err)
	}
	if after := checksum(t, nodeA, lv); after == before {
		t.Fatalf("the volume's checksum %s did not change with a write", after)
	}
	b := readyBase(t, nodeB, gi.Name)
	readyNodes(t, gi.Name, nodeA, nodeB)
	if b.From != nodeA {
		t.Errorf("the base on %s is from %q, want %q", nodeB, b.From, nodeA)
	}
	if a.ContentSHA256 == "" || b.ContentSHA256 != a.ContentSHA256 {
		t.Errorf("the bases' contentSHA256 are %q and %q, want the same", a.ContentSHA256, b.ContentSHA256)
	}
	if sa, sb := checksum(t, nodeA, a.LV), checksum(t, nodeB, b.LV); sa != before || sb != before {
		t.Errorf("the bases' XXH64 are %s (%s) and %s (%s), want both the volume's when the image was made, %s", sa, nodeA, sb, nodeB, before)
	}
}
