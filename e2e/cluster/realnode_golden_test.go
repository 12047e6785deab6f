package cluster_test

import (
	"crypto/rand"
	"testing"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

// TestGoldenVMDisk: a VM disk made from a golden image (a thin snapshot of
// the node's base) read by a pod through the kubelet's block mapping is the
// image, byte for byte.
func TestGoldenVMDisk(t *testing.T) {
	img := make([]byte, 8<<20) // 8 MiB of data, then zeros up to the base's 32 MiB
	if _, err := rand.Read(img); err != nil {
		t.Fatal(err)
	}
	full := append(img, make([]byte, 24<<20)...)
	images := imageserver.Start(t)
	gi := goldenImage("node-golden", images.Add("/img.raw", img), sum(img), thinlvmv1.FormatRaw, "32Mi")
	create(t, gi)
	t.Cleanup(func() { _ = k.Client.Delete(ctx, gi) })
	goldenClass(t, "node-golden", gi.Name)
	newClaim(t, "vm-disk", "node-golden", "1Gi", true)
	got := runPod(t, "vm-disk", true, "dd if=/dev/v0 bs=1M count=32 2>/dev/null | sha256sum | cut -c1-64", "vm-disk")
	if got != sum(full) {
		t.Errorf("the VM disk's first 32 MiB: sha256 %s, the image's %s", got, sum(full))
	}
}
