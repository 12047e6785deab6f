package csi_test

import (
	"context"
	"strings"
	"testing"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/controller/cachetest"
	"github.com/thinlvm/thinlvm/internal/testutil"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// goldenImageOn makes a GoldenImage of size and its Ready base on node, as
// the node's agent would have made it.
func goldenImageOn(t *testing.T, name, size, node string) *thinlvmv1.GoldenImage {
	t.Helper()
	ctx := context.Background()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/" + name + ".img", SHA256: strings.Repeat("c", 64)}},
		Size:   resource.MustParse(size)}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	base := thinlvmv1.BaseLVName(gi)
	if _, err := lvmd[node].CreateLV(ctx, &pb.CreateLVRequest{Name: base, SizeBytes: uint64(gi.Spec.Size.Value()), Tags: []string{thinlvmv1.BaseTagPrefix + name}}); err != nil {
		t.Fatal(err)
	}
	if _, err := lvmd[node].ChangeLV(ctx, &pb.ChangeLVRequest{Name: base, ReadOnly: ptr.To(true), Active: ptr.To(false)}); err != nil {
		t.Fatal(err)
	}
	return gi
}

// claim makes a claim in namespace (created if needed) with annotations.
func claim(t *testing.T, namespace, name string, annotations map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

// source is what a LogicalVolume is made from, nil when it is gone.
func source(t *testing.T, id string) *thinlvmv1.VolumeSource {
	t.Helper()
	lv := &thinlvmv1.LogicalVolume{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: id}, lv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	if lv.Spec.Source == nil {
		return &thinlvmv1.VolumeSource{}
	}
	return lv.Spec.Source
}

func createWith(name string, params map[string]string) (*csispec.Volume, error) {
	resp, err := srv.CreateVolume(context.Background(), &csispec.CreateVolumeRequest{Name: name, VolumeCapabilities: rwo, Parameters: params,
		CapacityRange: &csispec.CapacityRange{RequiredBytes: 1 << 30}, AccessibilityRequirements: top("n1")})
	return resp.GetVolume(), err
}

func claimParams(namespace, name string) map[string]string {
	return map[string]string{"csi.storage.k8s.io/pvc/namespace": namespace, "csi.storage.k8s.io/pvc/name": name}
}

// The populator's prime claim, in the controller's namespace, names the
// GoldenImage its volume is made from; the same annotation on a claim
// anywhere else is a tenant's and is ignored.
func TestPopulateAnnotation(t *testing.T) {
	goldenImageOn(t, "populate-img", "2Gi", "n1")
	ann := map[string]string{thinlvmv1.PopulateGoldenImageAnnotation: "populate-img"}
	claim(t, controllerNamespace, "populate-uid-1", ann)
	claim(t, "tenant", "sneaky", ann)
	claim(t, controllerNamespace, "populate-missing-image", map[string]string{thinlvmv1.PopulateGoldenImageAnnotation: "no-such-image"})
	claim(t, controllerNamespace, "plain", nil)

	v, err := createWith("pvc-populated", claimParams(controllerNamespace, "populate-uid-1"))
	if err != nil {
		t.Fatal(err)
	}
	if v.GetCapacityBytes() != 2<<30 {
		t.Errorf("volume of %d bytes, want the image's 2Gi", v.GetCapacityBytes())
	}
	if diff := cmp.Diff(&thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: "populate-img"}, source(t, v.GetVolumeId())); diff != "" {
		t.Errorf("source (-want +got):\n%s", diff)
	}
	base := thinlvmv1.BaseLVName(&thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{UID: imageUID(t, "populate-img")}})
	if lv, ok := lvmd["n1"].LV(t, v.GetVolumeId()); !ok || lv.GetOrigin() != base || lv.GetReadOnly() {
		t.Errorf("LV %v, want a writable snapshot of %s", lv, base)
	}
	// Repeated: the same volume.
	if again, err := createWith("pvc-populated", claimParams(controllerNamespace, "populate-uid-1")); err != nil || again.GetVolumeId() != v.GetVolumeId() {
		t.Errorf("repeat: %v %v", again, err)
	}

	// A tenant's claim with the annotation gets a plain volume.
	plain, err := createWith("pvc-sneaky", claimParams("tenant", "sneaky"))
	if err != nil {
		t.Fatal(err)
	}
	if got := source(t, plain.GetVolumeId()); got == nil || got.Kind != "" || plain.GetCapacityBytes() != 1<<30 {
		t.Errorf("a tenant's annotated claim: source %v, %d bytes; want an empty 1Gi volume", got, plain.GetCapacityBytes())
	}
	// A claim of the controller's namespace without the annotation too.
	if v, err := createWith("pvc-plain-own-ns", claimParams(controllerNamespace, "plain")); err != nil || source(t, v.GetVolumeId()).Kind != "" {
		t.Errorf("a claim of the controller's namespace without the annotation: %v %v", v, err)
	}

	for _, tt := range []struct {
		name, volume string
		params       map[string]string
		code         codes.Code
	}{
		{"annotation names a missing image", "pvc-populate-missing", claimParams(controllerNamespace, "populate-missing-image"), codes.NotFound},
		{"claim of the controller's namespace is gone", "pvc-populate-gone", claimParams(controllerNamespace, "no-such-claim"), codes.NotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := createWith(tt.volume, tt.params); status.Code(err) != tt.code {
				t.Errorf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if src := source(t, tt.volume); src != nil {
				t.Errorf("a LogicalVolume was left behind (source %v)", src)
			}
		})
	}
}

func imageUID(t *testing.T, name string) types.UID {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, gi); err != nil {
		t.Fatal(err)
	}
	return gi.UID
}

// A channel class's volume is made from the GoldenImage the channel points
// at when the volume is made, and keeps it: its LogicalVolume records the
// concrete image, and a repeated CreateVolume after the channel moved
// answers with the same volume.
func TestGoldenImageChannelClass(t *testing.T) {
	ctx := context.Background()
	goldenImageOn(t, "distro-v1", "2Gi", "n1")
	goldenImageOn(t, "distro-v2", "3Gi", "n1")
	ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "distro"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "distro-v1"}}
	if err := k8s.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	class := map[string]string{thinlvmv1.GoldenImageChannelParameter: "distro"}
	old, err := createWith("pvc-chan-old", class)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: "distro-v1"}, source(t, old.GetVolumeId())); diff != "" || old.GetCapacityBytes() != 2<<30 {
		t.Errorf("%d bytes, source (-want +got):\n%s", old.GetCapacityBytes(), diff)
	}

	before := ch.DeepCopy()
	ch.Spec.GoldenImage = "distro-v2"
	if err := k8s.Update(ctx, ch); err != nil {
		t.Fatal(err)
	}
	// The volume made right after the move is made from the new version
	// even by a controller whose cache has not seen the move yet (its
	// informer holds the channel's update event).
	held := *srv
	held.Client = cachetest.Held{Client: srv.Client, Before: before}
	again, err := createWith("pvc-chan-old", class)
	if err != nil || again.GetVolumeId() != old.GetVolumeId() {
		t.Fatalf("repeat after the channel moved: %v %v", again, err)
	}
	if got := source(t, old.GetVolumeId()); got.Name != "distro-v1" {
		t.Errorf("the old volume's source became %v", got)
	}
	resp, err := held.CreateVolume(ctx, &csispec.CreateVolumeRequest{Name: "pvc-chan-new", VolumeCapabilities: rwo, Parameters: class,
		CapacityRange: &csispec.CapacityRange{RequiredBytes: 1 << 30}, AccessibilityRequirements: top("n1")})
	if err != nil {
		t.Fatal(err)
	}
	fresh := resp.GetVolume()
	if got := source(t, fresh.GetVolumeId()); got.Name != "distro-v2" || fresh.GetCapacityBytes() != 3<<30 {
		t.Errorf("new volume: source %v, %d bytes; want distro-v2's 3Gi", got, fresh.GetCapacityBytes())
	}

	if err := k8s.Create(ctx, &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "dangling"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: "not-made"}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		params map[string]string
		code   codes.Code
		want   string
	}{
		{"image and channel", map[string]string{thinlvmv1.GoldenImageChannelParameter: "distro", thinlvmv1.GoldenImageParameter: "distro-v1"}, codes.InvalidArgument, "exclude each other"},
		{"missing channel", map[string]string{thinlvmv1.GoldenImageChannelParameter: "no-such-channel"}, codes.NotFound, "GoldenImageChannel no-such-channel"},
		{"channel to a missing image", map[string]string{thinlvmv1.GoldenImageChannelParameter: "dangling"}, codes.NotFound, "GoldenImage not-made"},
		{"another device class", map[string]string{thinlvmv1.GoldenImageChannelParameter: "distro", thinlvmv1.DeviceClassParameter: "hdd"}, codes.InvalidArgument, "device class"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			volume := "pvc-chan-bad-" + strings.ReplaceAll(tt.name, " ", "-")
			testutil.Eventually(t, "the controller's cache sees the channel", func() bool {
				return srv.Client.Get(ctx, types.NamespacedName{Name: "dangling"}, &thinlvmv1.GoldenImageChannel{}) == nil
			})
			_, err := createWith(volume, tt.params)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %v saying %q", err, tt.code, tt.want)
			}
			if src := source(t, volume); src != nil {
				t.Errorf("a LogicalVolume was left behind (source %v)", src)
			}
		})
	}
}
