package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

// TestGoldenVMDisk: a VM disk made from a golden image (a thin snapshot of
// the node's base) read by a pod through the kubelet's block mapping is the
// image, byte for byte.
func TestGoldenVMDisk(t *testing.T) {
	ctx := context.Background()
	img := make([]byte, 8<<20) // 8 MiB of data, then zeros up to the base's 32 MiB
	if _, err := rand.Read(img); err != nil {
		t.Fatal(err)
	}
	full := append(img, make([]byte, 24<<20)...)
	want := sha256.Sum256(full)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "img.raw", time.Unix(1e9, 0), bytes.NewReader(img))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	imgSum := sha256.Sum256(img)
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "node-golden"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://" + lvmvm.HostAddress + ":" + port + "/img.raw",
			SHA256: hex.EncodeToString(imgSum[:])}},
		Format: thinlvmv1.FormatRaw, Size: resource.MustParse("32Mi")}}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "node-golden"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete), Parameters: map[string]string{thinlvmv1.GoldenImageParameter: gi.Name}}
	if err := k.Client.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Client.Delete(ctx, gi) })
	if err := k.Client.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Client.Delete(ctx, sc) })
	if err := k.WaitCapacityFor(ctx, Node, sc.Name); err != nil {
		t.Fatal(err)
	}
	newClaim(t, "vm-disk", sc.Name, "1Gi", true)
	got := runPod(t, "vm-disk", true, "dd if=/dev/v0 bs=1M count=32 2>/dev/null | sha256sum | cut -c1-64", "vm-disk")
	if got != hex.EncodeToString(want[:]) {
		t.Errorf("the VM disk's first 32 MiB: sha256 %s, the image's %s", got, hex.EncodeToString(want[:]))
	}
}
