package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of thinlvm's API.
	GroupVersion = schema.GroupVersion{Group: "thinlvm.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a scheme. It is
	// apimachinery's, as the API packages of Kubernetes have it, so that
	// importing the types pulls in no controller framework.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// knownTypes are the group-version's types, as each types file registers
// them.
var knownTypes []runtime.Object

func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
