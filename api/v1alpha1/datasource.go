package v1alpha1

import corev1 "k8s.io/api/core/v1"

// ImageDataSource is a claim's dataSourceRef when it names a GoldenImage or
// a GoldenImageChannel (apiGroup thinlvm.io, KindGoldenImage or
// KindGoldenImageChannel, a name), nil for any other data source or none.
// The API server copies dataSource to dataSourceRef; dataSource is read
// too, for a claim that has only it. A ref with a namespace is returned as
// it is: the sources are cluster-scoped, and the caller refuses it.
func ImageDataSource(pvc *corev1.PersistentVolumeClaim) *corev1.TypedObjectReference {
	ref := pvc.Spec.DataSourceRef
	if ref == nil && pvc.Spec.DataSource != nil {
		ds := pvc.Spec.DataSource
		ref = &corev1.TypedObjectReference{APIGroup: ds.APIGroup, Kind: ds.Kind, Name: ds.Name}
	}
	if ref == nil || ref.APIGroup == nil || *ref.APIGroup != GroupVersion.Group || ref.Name == "" ||
		ref.Kind != KindGoldenImage && ref.Kind != KindGoldenImageChannel {
		return nil
	}
	return ref
}
