package images_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

// fromImage checks that a LogicalVolume is made from a GoldenImage.
func fromImage(t testing.TB, lv *thinlvmv1.LogicalVolume, image string) {
	t.Helper()
	want := thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: image}
	if lv.Spec.Source == nil || *lv.Spec.Source != want {
		t.Errorf("LogicalVolume %s has source %+v, want %+v", lv.Name, lv.Spec.Source, want)
	}
}

// A claim of a plain thinlvm class whose dataSourceRef names a GoldenImage
// binds, through the controller's populator, to a volume made from the
// image's base; the populator's claim in thinlvm's namespace goes, and
// deleting the claim leaves nothing.
func TestDataSourceRef(t *testing.T) {
	t.Parallel()
	o := imageserver.Start(t)
	raw := diskImage(31, imageSize, imageData)
	gi := httpImage("ref-disk", o.Add("/ref.raw", raw), raw, onNodes(nodeA))
	create(t, gi)
	defer deleteAndWait(t, gi)

	objs := disk(t, "ref-disk", cluster.BlockClass, "64Mi", nodeA, fromRef(thinlvmv1.KindGoldenImage, gi.Name))
	defer func() {
		// Deleted below, and checked; a test that stopped before leaves
		// nothing for the next run (-count) either.
		if t.Failed() {
			deleteAndWait(t, objs...)
		}
	}()
	v := bound(t, "ref-disk")
	fromImage(t, v.LV, gi.Name)
	if v.LV.Spec.NodeName != nodeA {
		t.Errorf("the volume is on %s, want %s", v.LV.Spec.NodeName, nodeA)
	}
	if ref := v.PV.Spec.ClaimRef; ref == nil || ref.Namespace != "default" || ref.Name != "ref-disk" || ref.UID != v.Claim.UID {
		t.Errorf("PV %s is bound to %+v, want the claim default/ref-disk", v.PV.Name, ref)
	}
	base := readyBase(t, nodeA, gi.Name)
	got, want := checksum(t, nodeA, v.LV.Status.VolumeID), checksum(t, nodeA, base.LV)
	if got != want || got != xxh64Hex(raw) {
		t.Errorf("the volume's XXH64 is %s, want its base's %s (the image's %s)", got, want, xxh64Hex(raw))
	}
	waitFor(t, "the populator's claims in "+cluster.Namespace+" to go", 2*time.Minute, func() (bool, error) {
		list := &corev1.PersistentVolumeClaimList{}
		if err := tb.Client.List(ctx, list, client.InNamespace(cluster.Namespace)); err != nil {
			return false, err
		}
		for _, c := range list.Items {
			if _, ok := c.Annotations[thinlvmv1.PopulateGoldenImageAnnotation]; ok {
				return false, nil
			}
		}
		return true, nil
	})

	deleteAndWait(t, objs...)
	if err := tb.WaitGone(ctx, 3*time.Minute, v.PV, v.LV); err != nil {
		t.Error(err)
	}
	lvGone(t, nodeA, v.LV.Status.VolumeID)
}

// point moves a channel to a GoldenImage.
func point(t testing.TB, ch *thinlvmv1.GoldenImageChannel, image string) {
	t.Helper()
	patch := client.MergeFrom(ch.DeepCopy())
	ch.Spec.GoldenImage = image
	if err := tb.Client.Patch(ctx, ch, patch); err != nil {
		t.Fatal(err)
	}
}

// A channel moved from v1 to v2: the claim made through it before keeps v1
// and its data, the one made after gets v2; the channel lists both
// versions. v1, deleted while another channel points at it, stays
// Terminating until that channel moves too, then goes with its bases, and
// the disk made from it keeps its data.
func TestChannelMovesToANewVersion(t *testing.T) {
	t.Parallel()
	o := imageserver.Start(t)
	raw1, raw2 := diskImage(41, imageSize, imageData), diskImage(42, imageSize, imageData)
	v1 := httpImage("chan-v1", o.Add("/v1.raw", raw1), raw1, onNodes(nodeA))
	v2 := httpImage("chan-v2", o.Add("/v2.raw", raw2), raw2, onNodes(nodeA))
	ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "chan"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: v1.Name}}
	create(t, v1, v2, ch)
	defer deleteAndWait(t, ch, v2, v1)

	disk1 := disk(t, "chan-disk-1", cluster.BlockClass, "64Mi", nodeA, fromRef(thinlvmv1.KindGoldenImageChannel, ch.Name))
	defer deleteAndWait(t, disk1...)
	d1 := bound(t, "chan-disk-1")
	fromImage(t, d1.LV, v1.Name)
	sum1 := checksum(t, nodeA, d1.LV.Status.VolumeID)
	if sum1 != xxh64Hex(raw1) {
		t.Errorf("the first disk's XXH64 is %s, want v1's %s", sum1, xxh64Hex(raw1))
	}

	point(t, ch, v2.Name)
	disk2 := disk(t, "chan-disk-2", cluster.BlockClass, "64Mi", nodeA, fromRef(thinlvmv1.KindGoldenImageChannel, ch.Name))
	defer deleteAndWait(t, disk2...)
	d2 := bound(t, "chan-disk-2")
	fromImage(t, d2.LV, v2.Name)
	if got := checksum(t, nodeA, d2.LV.Status.VolumeID); got != xxh64Hex(raw2) {
		t.Errorf("the second disk's XXH64 is %s, want v2's %s", got, xxh64Hex(raw2))
	}
	fromImage(t, bound(t, "chan-disk-1").LV, v1.Name)
	if got := checksum(t, nodeA, d1.LV.Status.VolumeID); got != sum1 {
		t.Errorf("the first disk's XXH64 changed to %s from %s", got, sum1)
	}
	var versions []thinlvmv1.ChannelVersion
	err := tb.WaitFor(ctx, "the channel's versions", 3*time.Minute, func() (bool, error) {
		got := &thinlvmv1.GoldenImageChannel{}
		if err := tb.Client.Get(ctx, client.ObjectKeyFromObject(ch), got); err != nil {
			return false, err
		}
		versions = got.Status.Versions
		return len(versions) == 2 &&
			versions[0].GoldenImage == v2.Name && versions[0].Current && versions[0].Volumes == 1 &&
			versions[1].GoldenImage == v1.Name && !versions[1].Current && versions[1].Volumes == 1 &&
			versions[1].ReadyNodes == 1 && slices.Equal(versions[1].Nodes, []string{nodeA}), nil
	})
	if err != nil {
		t.Fatalf("%v: versions %+v, want v2 current and v1 on %s, one volume each", err, versions, nodeA)
	}

	pin := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "chan-pin"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: v1.Name}}
	create(t, pin)
	defer deleteAndWait(t, pin)
	waitFor(t, v1.Name+" to list the channel "+pin.Name, 2*time.Minute, func() (bool, error) {
		return slices.Equal(getImage(t, v1.Name).Status.Channels, []string{pin.Name}), nil
	})
	if err := tb.Client.Delete(ctx, v1); err != nil {
		t.Fatal(err)
	}
	if got := getImage(t, v1.Name); got.DeletionTimestamp == nil || len(got.Finalizers) == 0 {
		t.Fatalf("%s after its deletion: deletionTimestamp %v, finalizers %v; want Terminating", v1.Name, got.DeletionTimestamp, got.Finalizers)
	}
	if got := checksum(t, nodeA, d1.LV.Status.VolumeID); got != sum1 {
		t.Errorf("the first disk's XXH64 changed to %s from %s", got, sum1)
	}
	if err := tb.Client.Get(ctx, client.ObjectKeyFromObject(v1), &thinlvmv1.GoldenImage{}); err != nil {
		t.Fatalf("%s while %s points at it: %v, want it Terminating", v1.Name, pin.Name, err)
	}
	if b, err := baseOn(nodeA, v1.Name); err != nil || b == nil || b.State != thinlvmv1.GoldenBaseReady {
		t.Errorf("%s's base on %s while %s points at it: %+v (%v), want Ready", v1.Name, nodeA, pin.Name, b, err)
	}

	point(t, pin, v2.Name)
	if err := tb.WaitGone(ctx, 3*time.Minute, v1); err != nil {
		t.Fatal(err)
	}
	basesGone(t, v1)
	if got := checksum(t, nodeA, d1.LV.Status.VolumeID); got != sum1 {
		t.Errorf("after %s went, the first disk's XXH64 is %s, want %s", v1.Name, got, sum1)
	}
}
