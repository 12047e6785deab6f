package cluster_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ulikunitz/xz"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

// helloText is the file every test image holds.
const helloText = "hello from the golden image\n"

// sum is a blob's sha256 as a GoldenImage names it.
func sum(b []byte) string { return imageserver.SHA256(b) }

// makeImage makes a raw disk image of size bytes holding an ext4 file
// system with hello.txt, with mkfs.ext4 -d (no root, no mount needed).
func makeImage(t testing.TB, size int64) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "root")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte(helloText), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "golden", "-d", src, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 -d (e2fsprogs): %v: %s", err, out)
	}
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func xzCompress(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err == nil {
		_, err = w.Write(raw)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func toQCOW2(t testing.TB, raw []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.raw"), filepath.Join(dir, "out.qcow2")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", in, out).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img (qemu-utils): %v: %s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func goldenImage(name, url, sha string, format thinlvmv1.ImageFormat, size string) *thinlvmv1.GoldenImage {
	return &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sha}}, Format: format,
		Size: resource.MustParse(size)}}
}

// goldenClass makes a Block, WaitForFirstConsumer class of VM disks from
// image, deleted when the test ends.
func goldenClass(t testing.TB, name, image string) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), Parameters: map[string]string{thinlvmv1.GoldenImageParameter: image}}
	if err := k.Client.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Client.Delete(ctx, sc) })
	if err := k.WaitCapacityFor(ctx, vmNode, name); err != nil {
		t.Fatal(err)
	}
	return sc
}

// vmDisk creates a Block claim of class and a pod using it on the VM node.
func vmDisk(t testing.TB, name, class, size string) {
	t.Helper()
	for _, o := range []client.Object{pvc(name, class, size, true), pod(name, true, onNode(vmNode), name)} {
		if err := k.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
}

// lvOf is the LV of a bound claim in the VM.
func lvOf(t testing.TB, claim string) string {
	t.Helper()
	_, pv := bound(t, claim)
	return logicalVolume(t, pv.Spec.CSI.VolumeHandle).Status.VolumeID
}

// inGuest runs argv in the VM, failing the test on error.
func inGuest(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := vm.Run(ctx, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readFile mounts an LV's ext4 file system read-only in the VM and returns
// the file's content ("" when absent).
func readFile(t testing.TB, lv, file string) string {
	t.Helper()
	dir := "/mnt/" + lv
	inGuest(t, "mkdir", "-p", dir)
	inGuest(t, "mount", "-t", "ext4", "-o", "ro,noload", "/dev/vg0/"+lv, dir)
	defer inGuest(t, "umount", dir)
	res, err := vm.Exec(ctx, "cat", dir+"/"+file)
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout)
}

// writeFile writes content to file on an LV's ext4 file system in the VM.
func writeFile(t testing.TB, lv, file, content string) {
	t.Helper()
	dir := "/mnt/" + lv
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	inGuest(t, "mkdir", "-p", dir)
	inGuest(t, "mount", "-t", "ext4", "/dev/vg0/"+lv, dir)
	inGuest(t, "cp", "/share/"+file, dir+"/"+file)
	inGuest(t, "umount", dir)
}

// bases are the golden base LVs in the VM with their attributes.
func bases(t testing.TB) map[string][]string {
	t.Helper()
	all, err := vm.LVS(ctx, "vg0", "lv_attr,lv_tags,lv_size")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for name, f := range all {
		if strings.HasPrefix(name, "gi-") {
			out[name] = f
		}
	}
	return out
}

// degradedWithoutBase waits until the GoldenImage is Degraded with a
// message naming why and the VM node, and checks that the VM holds no base
// of it.
func degradedWithoutBase(t testing.TB, gi *thinlvmv1.GoldenImage, why string) {
	t.Helper()
	waitFor(t, "the GoldenImage Degraded", 3*time.Minute, func() (bool, error) {
		c := meta.FindStatusCondition(imageStatus(t, gi.Name).Status.Conditions, thinlvmv1.ConditionImageDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, why) && strings.Contains(c.Message, vmNode), nil
	})
	// No base of the image is ever sealed (read-only). The agent retries
	// the image with a growing backoff, and each attempt makes a writable
	// LV it removes when refused: between attempts there is none.
	for name, f := range bases(t) {
		if strings.Contains(f[1], thinlvmv1.BaseTagPrefix+gi.Name) && len(f[0]) > 1 && f[0][1] == 'r' {
			t.Errorf("base %s %v sealed after %q", name, f, why)
		}
	}
	waitFor(t, "no base of "+gi.Name+" between attempts", 3*time.Minute, func() (bool, error) {
		for _, f := range bases(t) {
			if strings.Contains(f[1], thinlvmv1.BaseTagPrefix+gi.Name) {
				return false, nil
			}
		}
		return true, nil
	})
}

func imageStatus(t testing.TB, name string) *thinlvmv1.GoldenImage {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{}
	if err := k.Client.Get(ctx, types.NamespacedName{Name: name}, gi); err != nil {
		t.Fatal(err)
	}
	return gi
}

func cleanupDisks(t testing.TB, names ...string) {
	t.Helper()
	var objs []client.Object
	for _, n := range names {
		objs = append(objs, pod(n, true, nil), pvc(n, "", "1Gi", true))
	}
	deleteAll(t, objs...)
}

// Two VM disks from one base on real lvm2: each sees the base's file;
// writes in one are invisible in the other and in the base; deleting the
// GoldenImage removes the base and keeps the disks readable.
func TestGoldenImageVMDisks(t *testing.T) {
	images := imageserver.Start(t)
	raw := makeImage(t, 64<<20)
	body := xzCompress(t, raw) // compressed on the wire
	gi := goldenImage("debian-xz", images.Add("/debian.raw.xz", body), sum(body), thinlvmv1.FormatRaw, "256Mi")
	create(t, gi)
	goldenClass(t, "golden-debian", gi.Name)

	vmDisk(t, "disk-a", "golden-debian", "1Gi")
	vmDisk(t, "disk-b", "golden-debian", "1Gi")
	defer cleanupDisks(t, "disk-a", "disk-b", "disk-c")
	a, b := lvOf(t, "disk-a"), lvOf(t, "disk-b")
	baseLV := thinlvmv1.BaseLVName(gi)

	all, err := vm.LVS(ctx, "vg0", "origin,lv_attr,lv_size")
	if err != nil {
		t.Fatal(err)
	}
	for _, lv := range []string{a, b} {
		if f := all[lv]; len(f) != 3 || f[0] != baseLV || f[1][1] != 'w' || f[2] != strconv.Itoa(1<<30) {
			t.Errorf("disk LV %s: origin, attr, size %v; want a writable 1Gi snapshot of %s", lv, f, baseLV)
		}
	}
	if f := all[baseLV]; len(f) != 3 || f[1][1] != 'r' || f[1][4] == 'a' || f[2] != strconv.Itoa(256<<20) {
		t.Errorf("base %s: %v; want read-only, inactive, 256Mi", baseLV, f)
	}
	if got := imageStatus(t, gi.Name).Status; got.ReadyNodes != 1 || !meta.IsStatusConditionTrue(got.Conditions, thinlvmv1.ConditionImageReady) {
		t.Errorf("GoldenImage status %+v, want Ready on 1 node", got)
	}

	for _, lv := range []string{a, b} {
		if got := readFile(t, lv, "hello.txt"); got != helloText {
			t.Errorf("%s: hello.txt is %q", lv, got)
		}
	}
	writeFile(t, a, "only-a.txt", "written in disk a\n")
	if got := readFile(t, a, "only-a.txt"); got != "written in disk a\n" {
		t.Errorf("disk a lost its write: %q", got)
	}
	if got := readFile(t, b, "only-a.txt"); got != "" {
		t.Errorf("disk b sees disk a's write: %q", got)
	}
	// A disk made after the write sees the base as it was.
	vmDisk(t, "disk-c", "golden-debian", "1Gi")
	c := lvOf(t, "disk-c")
	if got := readFile(t, c, "only-a.txt"); got != "" {
		t.Errorf("the base changed: a new disk sees %q", got)
	}
	if got := readFile(t, c, "hello.txt"); got != helloText {
		t.Errorf("new disk: hello.txt is %q", got)
	}

	deleteAll(t, gi)
	waitFor(t, "the base removed", 2*time.Minute, func() (bool, error) {
		_, ok := bases(t)[baseLV]
		return !ok, nil
	})
	if got := readFile(t, a, "only-a.txt"); got != "written in disk a\n" {
		t.Errorf("after the base went, disk a reads %q", got)
	}
	if got := readFile(t, b, "hello.txt"); got != helloText {
		t.Errorf("after the base went, disk b reads %q", got)
	}
}

// A checksum mismatch: the GoldenImage says Degraded with the reason, no
// base is left, and the claim stays Pending.
func TestGoldenImageChecksumMismatch(t *testing.T) {
	images := imageserver.Start(t)
	raw := makeImage(t, 16<<20)
	gi := goldenImage("corrupt", images.Add("/corrupt.raw", raw), strings.Repeat("0", 64), thinlvmv1.FormatRaw, "64Mi")
	create(t, gi)
	defer deleteAll(t, gi)
	goldenClass(t, "golden-corrupt", gi.Name)
	vmDisk(t, "disk-corrupt", "golden-corrupt", "1Gi")
	defer cleanupDisks(t, "disk-corrupt")
	degradedWithoutBase(t, gi, "sha256 mismatch")
	c := &corev1.PersistentVolumeClaim{}
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "disk-corrupt"}, c); err != nil || c.Status.Phase != corev1.ClaimPending {
		t.Errorf("claim %v (%v), want Pending", c.Status.Phase, err)
	}
}

// A qcow2 image whose backing file is another tenant's LV on the node
// (the attack: every VM disk of the image would read that LV) is refused
// on real lvm2, with the agent, qemu-img and prlimit in the VM: the
// GoldenImage turns Degraded naming the refusal, no base is left, and the
// LV's bytes are in no thinlvm LV.
func TestGoldenImageBackingFileRefused(t *testing.T) {
	marker := make([]byte, 64<<10)
	if _, err := rand.Read(marker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), "marker"), marker, 0o644); err != nil {
		t.Fatal(err)
	}
	inGuest(t, "lvcreate", "-q", "-T", "vg0/pool0", "-V", "16M", "-n", "tenant-secret")
	defer inGuest(t, "lvremove", "-q", "-y", "vg0/tenant-secret")
	inGuest(t, "dd", "if=/share/marker", "of=/dev/vg0/tenant-secret", "bs=64k", "count=1", "conv=notrunc")

	dir := t.TempDir()
	evil := filepath.Join(dir, "evil.qcow2")
	if b, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", "/dev/vg0/tenant-secret", "-F", "raw", evil, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, b)
	}
	body, err := os.ReadFile(evil)
	if err != nil {
		t.Fatal(err)
	}
	images := imageserver.Start(t)
	gi := goldenImage("evil", images.Add("/evil.qcow2", body), sum(body), thinlvmv1.FormatQCOW2, "64Mi")
	create(t, gi)
	defer deleteAll(t, gi)
	goldenClass(t, "golden-evil", gi.Name)
	vmDisk(t, "disk-evil", "golden-evil", "1Gi")
	defer cleanupDisks(t, "disk-evil")
	degradedWithoutBase(t, gi, "image refused: qcow2 has a backing file")
	// No thinlvm LV holds the tenant's bytes.
	all, err := vm.LVS(ctx, "vg0", "lv_attr,lv_tags,lv_size")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range all {
		if !strings.Contains(f[1], "thinlvm") || f[0] != "" && f[0][0] == 't' { // the pool itself
			continue
		}
		out := inGuest(t, "sh", "-c", "dd if=/dev/vg0/"+name+" bs=64k count=1 2>/dev/null | cmp -s - /share/marker && echo LEAK || true")
		if strings.Contains(out, "LEAK") {
			t.Errorf("LV %s starts with the tenant's bytes", name)
		}
	}
	if got := inGuest(t, "sh", "-c", "dd if=/dev/vg0/tenant-secret bs=64k count=1 2>/dev/null | cmp -s - /share/marker && echo intact"); !strings.Contains(got, "intact") {
		t.Error("the tenant's LV was changed")
	}
}

// Five claims at once of a qcow2 image's class on a node without the base:
// one download, one base, five disks holding the image.
func TestGoldenImageOnePopulationForFiveDisks(t *testing.T) {
	images := imageserver.Start(t)
	body := toQCOW2(t, makeImage(t, 64<<20))
	gi := goldenImage("debian-qcow2", images.Add("/debian.qcow2", body), sum(body), thinlvmv1.FormatQCOW2, "128Mi")
	create(t, gi)
	defer deleteAll(t, gi)
	goldenClass(t, "golden-qcow2", gi.Name)
	var names []string
	for i := range 5 {
		names = append(names, fmt.Sprintf("qdisk-%d", i))
		vmDisk(t, names[i], "golden-qcow2", "512Mi")
	}
	defer cleanupDisks(t, names...)
	for _, n := range names {
		if got := readFile(t, lvOf(t, n), "hello.txt"); got != helloText {
			t.Errorf("%s: hello.txt is %q", n, got)
		}
	}
	if got := images.Requests("/debian.qcow2"); got != 1 {
		t.Errorf("%d downloads, want 1", got)
	}
	n := 0
	for _, f := range bases(t) {
		if strings.Contains(f[1], thinlvmv1.BaseTagPrefix+gi.Name) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d bases of %s, want 1", n, gi.Name)
	}
}

// The node agent is killed in the middle of a population (prewarm; the
// server holds the image after 8 MiB until the agent is dead, so the kill
// lands mid-population however slowly the guest runs ctr): the agent the
// kubelet starts again removes the half-written base and makes it again,
// and only a whole base is ever Ready.
func TestGoldenImagePopulationInterrupted(t *testing.T) {
	images := imageserver.Start(t)
	raw := makeImage(t, 32<<20)
	// Data all through the image, so a base cut short is not whole.
	for off := 1 << 20; off < len(raw); off += 64 << 10 {
		copy(raw[off+60<<10:off+64<<10], bytes.Repeat([]byte{0xA5}, 4<<10))
	}
	url := images.Add("/slow.raw", raw)
	release := images.Hold("/slow.raw", 8<<20)
	defer release()
	gi := goldenImage("slow", url, sum(raw), thinlvmv1.FormatRaw, "64Mi")
	gi.Spec.Prewarm = &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"thinlvm.io/test-vm": "true"}}}
	create(t, gi)
	defer deleteAll(t, gi)
	baseLV := thinlvmv1.BaseLVName(gi)
	waitFor(t, "the population under way", 2*time.Minute, func() (bool, error) {
		ln := &thinlvmv1.LVMNode{}
		if err := k.Client.Get(ctx, types.NamespacedName{Name: vmNode}, ln); err != nil {
			return false, err
		}
		for _, b := range ln.Status.GoldenBases {
			if b.Name == gi.Name && b.State == thinlvmv1.GoldenBasePopulating && b.BytesDone > 0 {
				return true, nil
			}
		}
		return false, nil
	})
	// The agent's container is frozen where it is, then killed; the
	// kubelet starts it again.
	id, restarts := pluginContainer(t, "thinlvm-node")
	ctr(t, "task", "pause", id)
	if f, ok := bases(t)[baseLV]; !ok || f[0][1] != 'w' {
		ctr(t, "task", "resume", id)
		t.Fatalf("when the agent stopped the base is %v; want a writable, half-written LV", f)
	}
	ctr(t, "task", "kill", "--signal", "SIGKILL", id)
	release()
	waitRestarted(t, "thinlvm-node", restarts)
	waitFor(t, "the base Ready", 3*time.Minute, func() (bool, error) {
		return imageStatus(t, gi.Name).Status.ReadyNodes == 1, nil
	})
	if f := bases(t)[baseLV]; len(f) == 0 || f[0][1] != 'r' {
		t.Errorf("base %v, want sealed", f)
	}
	if got := images.Requests("/slow.raw"); got < 2 {
		t.Errorf("%d downloads, want the cut one and a whole one", got)
	}
	// The whole image is in the base: a disk from it holds every byte.
	goldenClass(t, "golden-slow", gi.Name)
	vmDisk(t, "disk-slow", "golden-slow", "64Mi")
	defer cleanupDisks(t, "disk-slow")
	lv := lvOf(t, "disk-slow")
	inGuest(t, "dd", "if=/dev/vg0/"+lv, "bs=1M", fmt.Sprintf("count=%d", len(raw)>>20), "of=/share/disk-slow.img")
	got, err := os.ReadFile(filepath.Join(vm.ShareDir(), "disk-slow.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(vm.ShareDir(), "disk-slow.img"))
	if sum(got) != sum(raw) {
		t.Error("the disk does not hold the image byte for byte")
	}
}

// exampleObject reads one object of deploy/examples/kubevirt into out.
func exampleObject(t testing.TB, file string, out any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "examples", "kubevirt", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// The KubeVirt example as a user applies it: its StorageClass, GoldenImage
// (its URL and checksum swapped for a local qcow2 image: nothing is
// downloaded from outside) and root-disk claim; the VirtualMachine needs
// KubeVirt, so a pod on the VM node stands in for its virt-launcher. The
// claim binds as a Block volume, a snapshot of the base, holding the image.
func TestKubeVirtExample(t *testing.T) {
	var sc storagev1.StorageClass
	var gi thinlvmv1.GoldenImage
	var claim corev1.PersistentVolumeClaim
	var vmObj struct {
		Kind string `json:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					Volumes []struct {
						Name                  string `json:"name"`
						PersistentVolumeClaim *struct {
							ClaimName string `json:"claimName"`
						} `json:"persistentVolumeClaim"`
					} `json:"volumes"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	exampleObject(t, "storageclass.yaml", &sc)
	exampleObject(t, "goldenimage.yaml", &gi)
	exampleObject(t, "vm-root-disk.yaml", &claim)
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "examples", "kubevirt", "virtualmachine.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &vmObj); err != nil {
		t.Fatal(err)
	}
	var root string
	for _, v := range vmObj.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			root = v.PersistentVolumeClaim.ClaimName
		}
	}
	if vmObj.Kind != "VirtualMachine" || root != claim.Name || claim.Spec.VolumeMode == nil || *claim.Spec.VolumeMode != corev1.PersistentVolumeBlock ||
		*claim.Spec.StorageClassName != sc.Name || sc.Parameters[thinlvmv1.GoldenImageParameter] != gi.Name || gi.Spec.Format != thinlvmv1.FormatQCOW2 {
		t.Fatalf("the example's objects do not fit together: VM root claim %q, claim %s (%v, class %s), class %s of image %q, image %s (%s)",
			root, claim.Name, claim.Spec.VolumeMode, *claim.Spec.StorageClassName, sc.Name, sc.Parameters[thinlvmv1.GoldenImageParameter], gi.Name, gi.Spec.Format)
	}

	images := imageserver.Start(t)
	body := toQCOW2(t, makeImage(t, 64<<20))
	gi.Spec.Source.HTTP.URL, gi.Spec.Source.HTTP.SHA256 = images.Add("/ubuntu.qcow2", body), sum(body)
	create(t, &gi, &sc)
	defer deleteAll(t, &gi, &sc)
	if err := k.WaitCapacityFor(ctx, vmNode, sc.Name); err != nil {
		t.Fatal(err)
	}
	create(t, &claim, pod("virt-launcher-vm1", true, onNode(vmNode), claim.Name))
	defer cleanupDisks(t, "virt-launcher-vm1", claim.Name)
	c, pv := bound(t, claim.Name)
	if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != corev1.PersistentVolumeBlock || c.Status.Capacity.Storage().Cmp(*claim.Spec.Resources.Requests.Storage()) != 0 {
		t.Errorf("PV %s: mode %v, claim capacity %v; want a Block volume of the requested size", pv.Name, pv.Spec.VolumeMode, c.Status.Capacity.Storage())
	}
	lv := logicalVolume(t, pv.Spec.CSI.VolumeHandle).Status.VolumeID
	all, err := vm.LVS(ctx, "vg0", "origin")
	if err != nil {
		t.Fatal(err)
	}
	if got := all[lv]; len(got) != 1 || got[0] != thinlvmv1.BaseLVName(&gi) {
		t.Errorf("root disk LV %s has origin %v, want the base %s", lv, got, thinlvmv1.BaseLVName(&gi))
	}
	if got := readFile(t, lv, "hello.txt"); got != helloText {
		t.Errorf("root disk: hello.txt is %q", got)
	}
}
