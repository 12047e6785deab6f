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

// GoldenImageOf decides which GoldenImage a claim's volume is made from,
// for the controller that makes it and the scheduler that places it: a
// GoldenImage's name, or a GoldenImageChannel whose current GoldenImage the
// caller reads; both empty for none. pvc may be nil (the controller knows
// only the class's parameters).
//
//   - A claim whose dataSourceRef names a GoldenImage: it. One naming a
//     GoldenImageChannel: the GoldenImage the populator resolved it to
//     (annotation thinlvm.io/golden-image), or before it did, the channel.
//     A ref with a namespace: none (the sources are cluster-scoped; the
//     populator refuses it).
//   - Otherwise the class's golden-image parameter, else its
//     golden-image-channel parameter.
//
// The populator's prime claim names its GoldenImage by another annotation,
// which only the controller reads, and only in its own namespace.
func GoldenImageOf(pvc *corev1.PersistentVolumeClaim, params map[string]string) (name, channel string) {
	if pvc != nil {
		if ref := ImageDataSource(pvc); ref != nil {
			switch {
			case ref.Namespace != nil && *ref.Namespace != "":
				return "", ""
			case ref.Kind == KindGoldenImage:
				return ref.Name, ""
			case pvc.Annotations[GoldenImageAnnotation] != "":
				return pvc.Annotations[GoldenImageAnnotation], ""
			}
			return "", ref.Name
		}
	}
	if img := params[GoldenImageParameter]; img != "" {
		return img, ""
	}
	return "", params[GoldenImageChannelParameter]
}
