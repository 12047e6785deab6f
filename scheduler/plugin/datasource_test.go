package plugin

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// withRef gives a claim a dataSourceRef to a thinlvm object of kind, and
// the dataSource the API server copies from it.
func withRef(pvc *corev1.PersistentVolumeClaim, kind, name string) {
	group := thinlvmv1.GroupVersion.Group
	pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: &group, Kind: kind, Name: name}
	pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: kind, Name: name}
}

// A claim whose dataSourceRef names a GoldenImage or a channel, and a class
// naming a channel, need the image's base as a golden class's claim does:
// the demand names the image (the one the channel points at, or the one
// the populator already resolved the claim to), in the image's device
// class.
func TestDemandOfImageDataSources(t *testing.T) {
	f := newFake()
	wfc := storagev1.VolumeBindingWaitForFirstConsumer
	f.scs["channel"] = &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "channel"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: &wfc, Parameters: map[string]string{thinlvmv1.GoldenImageChannelParameter: "lts"}}
	f.scs["dangling-channel"] = &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "dangling-channel"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: &wfc, Parameters: map[string]string{thinlvmv1.GoldenImageChannelParameter: "no-such-channel"}}
	f.addImage("ubuntu", "u1", "", "4Gi")
	f.addImage("noble", "n1", "hdd", "4Gi")
	f.channels = map[string]*thinlvmv1.GoldenImageChannel{"lts": {ObjectMeta: metav1.ObjectMeta{Name: "lts"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "noble"}}}
	for _, tt := range []struct {
		name  string
		class string
		setup func(*corev1.PersistentVolumeClaim)
		image string // "" for none
		dc    string // the device class the bytes count in
	}{
		{"GoldenImage ref", "thin", func(c *corev1.PersistentVolumeClaim) { withRef(c, thinlvmv1.KindGoldenImage, "ubuntu") }, "ubuntu", ""},
		{"channel ref: its current image, in its class", "thin", func(c *corev1.PersistentVolumeClaim) { withRef(c, thinlvmv1.KindGoldenImageChannel, "lts") }, "noble", "hdd"},
		{"channel ref already resolved: the recorded image", "thin", func(c *corev1.PersistentVolumeClaim) {
			withRef(c, thinlvmv1.KindGoldenImageChannel, "lts")
			c.Annotations = map[string]string{thinlvmv1.GoldenImageAnnotation: "ubuntu"}
		}, "ubuntu", ""},
		{"the annotation of a GoldenImage ref is not read", "thin", func(c *corev1.PersistentVolumeClaim) {
			withRef(c, thinlvmv1.KindGoldenImage, "ubuntu")
			c.Annotations = map[string]string{thinlvmv1.GoldenImageAnnotation: "noble"}
		}, "ubuntu", ""},
		{"the claim's ref over its golden class's image", "golden", func(c *corev1.PersistentVolumeClaim) { withRef(c, thinlvmv1.KindGoldenImageChannel, "lts") }, "noble", "hdd"},
		{"channel class", "channel", func(*corev1.PersistentVolumeClaim) {}, "noble", "hdd"},
		{"channel class, a clone: the class's image's device class, not its base", "channel", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "origin"}
		}, "", "hdd"},
		{"missing channel ref", "thin", func(c *corev1.PersistentVolumeClaim) { withRef(c, thinlvmv1.KindGoldenImageChannel, "no-such-channel") }, "", ""},
		{"missing image ref", "thin", func(c *corev1.PersistentVolumeClaim) { withRef(c, thinlvmv1.KindGoldenImage, "no-such-image") }, "", ""},
		{"missing channel in the class", "dangling-channel", func(*corev1.PersistentVolumeClaim) {}, "", ""},
		{"namespaced ref: never populated", "thin", func(c *corev1.PersistentVolumeClaim) {
			withRef(c, thinlvmv1.KindGoldenImage, "ubuntu")
			c.Spec.DataSourceRef.Namespace = ptr.To("elsewhere")
			c.Spec.DataSource = nil
		}, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.addClaim("root", tt.class, "2Gi")
			tt.setup(f.pvcs["default/root"])
			d, err := NewWithLister(defaultArgs(), f).demandOf(podWith("vm", "root"))
			if err != nil {
				t.Fatal(err)
			}
			var images []string
			for _, gi := range d.images {
				images = append(images, gi.Name)
			}
			var want []string
			if tt.image != "" {
				want = []string{tt.image}
			}
			if diff := cmp.Diff(want, images); diff != "" {
				t.Errorf("images (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int64{tt.dc: 2 << 30}, d.bytes); diff != "" {
				t.Errorf("bytes by device class (-want +got):\n%s", diff)
			}
		})
	}
}

// A VM disk populated from a GoldenImage scores higher where the base is
// Ready, and a node without room for the base it lacks is filtered out,
// as for a golden class.
func TestImageDataSourceLocalityAndRoom(t *testing.T) {
	f := newFake()
	gi := f.addImage("ubuntu", "u1", "", "4Gi")
	f.addNode("holder", "20Gi", "20Gi", goldenBase(gi, thinlvmv1.GoldenBaseReady))
	f.addNode("empty", "20Gi", "20Gi")
	f.addNode("tight", "5Gi", "20Gi")
	f.channels = map[string]*thinlvmv1.GoldenImageChannel{"lts": {ObjectMeta: metav1.ObjectMeta{Name: "lts"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "ubuntu"}}}
	for _, kind := range []string{thinlvmv1.KindGoldenImage, thinlvmv1.KindGoldenImageChannel} {
		t.Run(kind, func(t *testing.T) {
			f.addClaim("root", "thin", "2Gi")
			withRef(f.pvcs["default/root"], kind, map[string]string{thinlvmv1.KindGoldenImage: "ubuntu", thinlvmv1.KindGoldenImageChannel: "lts"}[kind])
			p := NewWithLister(defaultArgs(), f)
			pod := podWith("vm", "root")
			state, _, st := cycle(t, p, pod, "holder", "empty", "tight")
			if !st["holder"].IsSuccess() || !st["empty"].IsSuccess() {
				t.Fatalf("filter: %v", st)
			}
			if st["tight"].Code() != fwk.Unschedulable {
				t.Errorf("tight (5Gi for the 2Gi disk and the 4Gi base it lacks): %v, want Unschedulable", st["tight"])
			}
			holder, _ := p.Score(context.Background(), state, pod, nodeInfo("holder"))
			empty, _ := p.Score(context.Background(), state, pod, nodeInfo("empty"))
			if holder <= empty {
				t.Errorf("scores: holder %d, empty %d; want the base's holder higher", holder, empty)
			}
		})
	}
}
