package v1alpha1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func TestImageDataSource(t *testing.T) {
	group, snapGroup, other := thinlvmv1.GroupVersion.Group, "snapshot.storage.k8s.io", "example.com"
	gi := &corev1.TypedObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImage, Name: "ubuntu"}
	for _, tt := range []struct {
		name string
		spec corev1.PersistentVolumeClaimSpec
		want *corev1.TypedObjectReference
	}{
		{"none", corev1.PersistentVolumeClaimSpec{}, nil},
		{"GoldenImage", corev1.PersistentVolumeClaimSpec{DataSourceRef: gi}, gi},
		{"channel", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImageChannel, Name: "lts"}},
			&corev1.TypedObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImageChannel, Name: "lts"}},
		{"dataSource only", corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImage, Name: "ubuntu"}}, gi},
		{"namespaced, returned for the caller to refuse", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImage, Name: "ubuntu", Namespace: &other}},
			&corev1.TypedObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImage, Name: "ubuntu", Namespace: &other}},
		{"another group's GoldenImage", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &other, Kind: thinlvmv1.KindGoldenImage, Name: "ubuntu"}}, nil},
		{"a thinlvm kind that is no source", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &group, Kind: "LogicalVolume", Name: "x"}}, nil},
		{"a clone", corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "x"}}, nil},
		{"a restore", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &snapGroup, Kind: "VolumeSnapshot", Name: "x"}}, nil},
		{"no name", corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{APIGroup: &group, Kind: thinlvmv1.KindGoldenImage}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := thinlvmv1.ImageDataSource(&corev1.PersistentVolumeClaim{Spec: tt.spec})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The controller and the scheduler plugin choose a claim's GoldenImage by
// this one function.
func TestGoldenImageOf(t *testing.T) {
	group, other := thinlvmv1.GroupVersion.Group, "tenant"
	claim := func(kind, name string, ns *string, annotations map[string]string) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{}
		pvc.Annotations = annotations
		if kind != "" {
			pvc.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: &group, Kind: kind, Name: name, Namespace: ns}
		}
		return pvc
	}
	image := map[string]string{thinlvmv1.GoldenImageParameter: "debian"}
	channel := map[string]string{thinlvmv1.GoldenImageChannelParameter: "stable"}
	for _, tt := range []struct {
		name          string
		pvc           *corev1.PersistentVolumeClaim
		params        map[string]string
		image, chName string
	}{
		{"none", nil, nil, "", ""},
		{"class image", nil, image, "debian", ""},
		{"class channel", nil, channel, "", "stable"},
		{"claim without a source: the class's", claim("", "", nil, nil), image, "debian", ""},
		{"claim's GoldenImage over the class's", claim(thinlvmv1.KindGoldenImage, "ubuntu", nil, nil), image, "ubuntu", ""},
		{"claim's channel, not resolved yet", claim(thinlvmv1.KindGoldenImageChannel, "lts", nil, nil), image, "", "lts"},
		{"claim's channel, resolved by the populator", claim(thinlvmv1.KindGoldenImageChannel, "lts", nil, map[string]string{thinlvmv1.GoldenImageAnnotation: "ubuntu-24"}), channel, "ubuntu-24", ""},
		{"namespaced ref: none, not the class's", claim(thinlvmv1.KindGoldenImage, "ubuntu", &other, nil), image, "", ""},
		{"the prime claim's annotation is not read here", claim("", "", nil, map[string]string{thinlvmv1.PopulateGoldenImageAnnotation: "ubuntu"}), nil, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img, ch := thinlvmv1.GoldenImageOf(tt.pvc, tt.params)
			if img != tt.image || ch != tt.chName {
				t.Errorf("GoldenImageOf = %q, %q; want %q, %q", img, ch, tt.image, tt.chName)
			}
		})
	}
}
