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
