package reconciler_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	"github.com/thinlvm/thinlvm/node/reconciler"
)

// foreignLV is an LV another driver (TopoLVM, say) made, with the bytes at
// the start of its device.
type foreignLV struct {
	lv   fake.LV
	data []byte
}

// adoptLVMD is an lvmd whose lvm holds LVs it did not make.
type adoptLVMD struct {
	*lvmdtest.LVMD
	devDir string
}

// devicePath is where the simulated lvm backs vg/name.
func (l *adoptLVMD) devicePath(vg, name string) string { return filepath.Join(l.devDir, vg, name) }

// startAdoptLVMD runs lvmd with two device classes: "ssd" (the default),
// thin on vg0/pool0, and "thick" on vg1. Beside them lvm holds a thin pool
// of no class in each VG, vg0/topolvm and vg1/tp1, and the foreign LVs,
// none tagged "thinlvm", each backed by a file of its size holding its
// data.
func startAdoptLVMD(t *testing.T, foreign ...foreignLV) *adoptLVMD {
	t.Helper()
	dir := t.TempDir()
	r := &fake.Runner{
		VGs: []fake.VG{
			{Name: "vg0", UUID: "vg0-uuid", Size: 110 << 30, Free: 4 << 30},
			{Name: "vg1", UUID: "vg1-uuid", Size: 2 << 30, Free: 2<<30 - 512<<20},
		},
		Pools: []fake.Pool{
			{VG: "vg0", Name: "pool0", UUID: "pool0-uuid", Size: 100 << 30},
			{VG: "vg0", Name: "topolvm", UUID: "topolvm-uuid", Size: 6 << 30},
			{VG: "vg1", Name: "tp1", UUID: "tp1-uuid", Size: 512 << 20},
		},
	}
	for _, f := range foreign {
		r.LVs = append(r.LVs, f.lv)
		if f.lv.Pool == "" { // a linear LV takes its extents from the VG
			for i := range r.VGs {
				if r.VGs[i].Name == f.lv.VG {
					r.VGs[i].Free -= f.lv.Size
				}
			}
		}
		writeDevice(t, filepath.Join(dir, f.lv.VG, f.lv.Name), f.lv.Size, f.data)
	}
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{
		{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true},
		{Name: "thick", Type: config.Thick, VolumeGroup: "vg1"},
	}}
	cfg.Default()
	return &adoptLVMD{LVMD: lvmdtest.Start(t, lvmdtest.Options{Config: cfg, Runner: r, DevDir: dir}), devDir: dir}
}

// writeDevice makes the backing file of an LV of size bytes starting with
// data.
func writeDevice(t *testing.T, path string, size uint64, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(size)); err != nil {
		t.Fatal(err)
	}
}

// deviceOf is what writeDevice wrote.
func deviceOf(size uint64, data []byte) []byte {
	b := make([]byte, size)
	copy(b, data)
	return b
}

func newAdoptLV(name, node, class, size string) *thinlvmv1.LogicalVolume {
	lv := newLV(name, node, size)
	lv.Spec.DeviceClass = class
	lv.Spec.Adopt = true
	return lv
}

// adoptedTags are the tags of an LV the LogicalVolume name adopted.
func adoptedTags(name string) []string { return []string{"thinlvm", reconciler.OwnerTagPrefix + name} }

// noneMade fails t if the agent asked lvmd to make or grow an LV, or lvm
// ran a command that would.
func noneMade(t *testing.T, l *adoptLVMD) {
	t.Helper()
	for _, m := range []string{"CreateLV", "CreateSnapshot", "ResizeLV"} {
		if n := l.Count(m); n != 0 {
			t.Errorf("the agent called %s %d times", m, n)
		}
	}
	for _, c := range []string{"lvcreate", "lvextend"} {
		if n := l.LVM.Count(c); n != 0 {
			t.Errorf("lvm ran %s %d times", c, n)
		}
	}
}

// failedWith waits until the LogicalVolume name is Failed for reason, and
// returns its Failed condition.
func failedWith(t *testing.T, name, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	testutil.Eventually(t, name+" to fail with "+reason, func() bool {
		c = meta.FindStatusCondition(get(t, name).Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	})
	return c
}

// A LogicalVolume with spec.adopt takes over the thin LV of its name in
// its class's pool in place: Ready at the LV's size (not the spec's
// smaller one), tagged thinlvm's and the object's, its data untouched,
// nothing made or grown. Deleting the object then removes the LV: it is
// thinlvm's now.
func TestAdoptThinLV(t *testing.T) {
	ctx := context.Background()
	const name = "pvc-adopt-thin"
	data := bytes.Repeat([]byte("topolvm's thin data "), (3<<20)/20)
	l := startAdoptLVMD(t, foreignLV{fake.LV{VG: "vg0", Name: name, Pool: "pool0", Size: 16 << 20}, data})
	if _, ok := l.LV(t, name); ok {
		t.Fatal("lvmd lists the foreign LV before its adoption")
	}
	node, _ := startAgent(t, l.LVMD)
	if err := k8sClient.Create(ctx, newAdoptLV(name, node, "", "12Mi")); err != nil {
		t.Fatal(err)
	}
	got := checkAdopted(t, l, name, "vg0", "pool0", data)
	if c := meta.FindStatusCondition(got.Status.Conditions, thinlvmv1.ConditionFailed); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Failed condition %+v", c)
	}
	deleteAdopted(t, l, got, "vg0")
}

// A thick class adopts a linear LV of its VG the same way.
func TestAdoptThickLV(t *testing.T) {
	ctx := context.Background()
	const name = "pvc-adopt-thick"
	data := bytes.Repeat([]byte("topolvm's thick data "), (3<<20)/21)
	l := startAdoptLVMD(t, foreignLV{fake.LV{VG: "vg1", Name: name, Size: 16 << 20}, data})
	node, _ := startAgent(t, l.LVMD)
	if err := k8sClient.Create(ctx, newAdoptLV(name, node, "thick", "16Mi")); err != nil {
		t.Fatal(err)
	}
	got := checkAdopted(t, l, name, "vg1", "", data)
	if pv, ok := l.LV(t, name); !ok || !pv.GetThick() || pv.GetDeviceClass() != "thick" {
		t.Errorf("lvmd's view of the adopted LV: %v; want a thick LV of class thick", pv)
	}
	deleteAdopted(t, l, got, "vg1")
}

// checkAdopted waits until the LogicalVolume name took over its 16 MiB LV
// in vg (in pool; "" for a linear LV) and checks the takeover: Ready at the
// LV's size, the LV tagged thinlvm's and the object's, its data (data at
// its start) untouched, AdoptLV called and nothing made or grown.
func checkAdopted(t *testing.T, l *adoptLVMD, name, vg, pool string, data []byte) *thinlvmv1.LogicalVolume {
	t.Helper()
	got := readyLV(t, name)
	if got.Status.VolumeID != name || got.Status.CurrentSize == nil || got.Status.CurrentSize.Cmp(resource.MustParse("16Mi")) != 0 {
		t.Errorf("status %+v: want volume %s at the LV's 16Mi", got.Status, name)
	}
	v, ok := l.LVM.GetLV(vg, name)
	if !ok || v.Pool != pool || v.Size != 16<<20 || !slices.Equal(v.Tags, adoptedTags(name)) {
		t.Errorf("the LV after the adoption: %+v (found %v); want it in pool %q (none: linear), 16 MiB, tagged %v", v, ok, pool, adoptedTags(name))
	}
	if !bytes.Equal(l.Data(t, name), deviceOf(16<<20, data)) {
		t.Error("the adopted LV's data changed")
	}
	if l.Count("AdoptLV") == 0 {
		t.Error("the agent never called AdoptLV")
	}
	noneMade(t, l)
	return got
}

// deleteAdopted deletes an adopted LogicalVolume and checks that its LV
// in vg went with it: it is thinlvm's.
func deleteAdopted(t *testing.T, l *adoptLVMD, lv *thinlvmv1.LogicalVolume, vg string) {
	t.Helper()
	if err := k8sClient.Delete(context.Background(), lv); err != nil {
		t.Fatal(err)
	}
	gone(t, lv.Name)
	if v, ok := l.LVM.GetLV(vg, lv.Name); ok {
		t.Errorf("the adopted LV %+v outlived its LogicalVolume", v)
	}
	if _, err := os.Stat(l.devicePath(vg, lv.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the adopted LV's device: %v, want it removed", err)
	}
}

// An LV that cannot join the class (in another thin pool, thin in a thick
// class, linear in a thin one) is refused for good (ForeignLV), an absent
// one until it appears (SourceNotFound); nothing is made or tagged.
// Deleting the refused objects completes and leaves the foreign LVs as
// they were: finalize removes only an LV that carries the object's tag.
func TestAdoptRefusals(t *testing.T) {
	ctx := context.Background()
	foreign := []fake.LV{
		{VG: "vg0", Name: "pvc-adopt-other-pool", Pool: "topolvm", Size: 16 << 20, Tags: []string{"owner:topolvm"}},
		{VG: "vg1", Name: "pvc-adopt-thin-in-thick", Pool: "tp1", Size: 16 << 20},
		{VG: "vg0", Name: "pvc-adopt-linear-in-thin", Size: 16 << 20},
	}
	var fl []foreignLV
	for _, lv := range foreign {
		fl = append(fl, foreignLV{lv, []byte("not thinlvm's: " + lv.Name)})
	}
	l := startAdoptLVMD(t, fl...)
	node, _ := startAgent(t, l.LVMD)
	cases := []struct {
		name, class, reason, fragment string
	}{
		{"pvc-adopt-other-pool", "", thinlvmv1.ReasonForeignLV, `in thin pool "topolvm", not the class's "pool0"`},
		{"pvc-adopt-thin-in-thick", "thick", thinlvmv1.ReasonForeignLV, "not a plain linear LV"},
		{"pvc-adopt-linear-in-thin", "", thinlvmv1.ReasonForeignLV, "not a thin LV"},
		{"pvc-adopt-absent", "", thinlvmv1.ReasonSourceNotFound, "no lv vg0/pvc-adopt-absent"},
	}
	for _, c := range cases {
		if err := k8sClient.Create(ctx, newAdoptLV(c.name, node, c.class, "16Mi")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed := failedWith(t, c.name, c.reason)
			if !strings.Contains(failed.Message, c.fragment) {
				t.Errorf("Failed condition %+v: want its message to say %q", failed, c.fragment)
			}
			lv := get(t, c.name)
			if meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) || lv.Status.VolumeID != "" {
				t.Errorf("status %+v: want not Ready, no volume", lv.Status)
			}
		})
	}
	// The absent LV is looked for again after the agent's retry delay
	// (200ms here): still nothing is made for it.
	adopts := l.Count("AdoptLV")
	testutil.Eventually(t, "the absent LV to be looked for again", func() bool { return l.Count("AdoptLV") > adopts })
	time.Sleep(500 * time.Millisecond)
	noneMade(t, l)
	if _, ok := l.LVM.GetLV("vg0", "pvc-adopt-absent"); ok {
		t.Error("an LV was made for the absent one")
	}
	for _, lv := range foreign {
		if got, ok := l.LVM.GetLV(lv.VG, lv.Name); !ok || !slices.Equal(got.Tags, lv.Tags) {
			t.Errorf("refused LV %s/%s: %+v (found %v), want its tags %v unchanged", lv.VG, lv.Name, got, ok, lv.Tags)
		}
	}

	for _, c := range cases {
		if err := k8sClient.Delete(ctx, get(t, c.name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		gone(t, c.name)
	}
	for _, lv := range foreign {
		got, ok := l.LVM.GetLV(lv.VG, lv.Name)
		if !ok || !slices.Equal(got.Tags, lv.Tags) || got.Size != lv.Size || got.Pool != lv.Pool {
			t.Errorf("refused LV %s/%s after its LogicalVolume was deleted: %+v (found %v), want it as it was", lv.VG, lv.Name, got, ok)
		}
		if b, err := os.ReadFile(l.devicePath(lv.VG, lv.Name)); err != nil || !bytes.Equal(b, deviceOf(lv.Size, []byte("not thinlvm's: "+lv.Name))) {
			t.Errorf("refused LV %s/%s's data changed (%v)", lv.VG, lv.Name, err)
		}
	}
	if n, m := l.Count("RemoveLV"), l.LVM.Count("lvremove"); n != 0 || m != 0 {
		t.Errorf("deleting refused LogicalVolumes called RemoveLV %d times, lvremove %d times", n, m)
	}
	if names := l.LVNames(t); len(names) != 0 {
		t.Errorf("lvmd manages %v", names)
	}
}

// An LV absent when its adoption was first tried is adopted once it
// appears: SourceNotFound is retried after the agent's delay.
func TestAdoptLVThatAppearsLater(t *testing.T) {
	ctx := context.Background()
	const name = "pvc-adopt-later"
	l := startAdoptLVMD(t)
	node, _ := startAgent(t, l.LVMD)
	if err := k8sClient.Create(ctx, newAdoptLV(name, node, "", "16Mi")); err != nil {
		t.Fatal(err)
	}
	failedWith(t, name, thinlvmv1.ReasonSourceNotFound)
	data := []byte("made by another driver after the LogicalVolume")
	writeDevice(t, l.devicePath("vg0", name), 16<<20, data)
	l.LVM.AddLV(fake.LV{VG: "vg0", Name: name, Pool: "pool0", Size: 16 << 20})
	deleteAdopted(t, l, checkAdopted(t, l, name, "vg0", "pool0", data), "vg0")
}

// A LogicalVolume deleted while its adoption is not done (the annotation
// thinlvm.io/adopt-of on it) keeps its LV: the claim's data. The deletion
// waits, saying why, until the annotation is removed; then it removes the
// LV as any other.
func TestAdoptionInProgressKeepsTheLV(t *testing.T) {
	ctx := context.Background()
	const name = "pvc-adopt-held"
	data := bytes.Repeat([]byte("a claim's data "), (1<<20)/15)
	l := startAdoptLVMD(t, foreignLV{fake.LV{VG: "vg0", Name: name, Pool: "pool0", Size: 16 << 20}, data})
	node, _ := startAgent(t, l.LVMD)
	lv := newAdoptLV(name, node, "ssd", "16Mi")
	lv.Annotations = map[string]string{thinlvmv1.AdoptOfAnnotation: "db/data"}
	if err := k8sClient.Create(ctx, lv); err != nil {
		t.Fatal(err)
	}
	got := readyLV(t, name)
	if err := k8sClient.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	c := failedWith(t, name, thinlvmv1.ReasonConflict)
	if !strings.Contains(c.Message, "holds that claim's data and is kept") || !strings.Contains(c.Message, "db/data") {
		t.Errorf("the refused deletion says %q", c.Message)
	}
	if v, ok := l.LVM.GetLV("vg0", name); !ok || !bytes.Equal(l.Data(t, name), deviceOf(16<<20, data)) {
		t.Fatalf("the LV of an adoption in progress: %+v (found %v), or its data changed", v, ok)
	}
	cur := get(t, name)
	patch := client.MergeFrom(cur.DeepCopy())
	delete(cur.Annotations, thinlvmv1.AdoptOfAnnotation)
	if err := k8sClient.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	gone(t, name)
	if _, ok := l.LVM.GetLV("vg0", name); ok {
		t.Error("the LV outlived its LogicalVolume once the adoption's annotation was gone")
	}
}
