package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: config.GroupName, Version: "v1"}

var (
	// SchemeBuilder registers the v1 type, its defaulters and (from the
	// generated conversion's init) its conversions.
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes, RegisterDefaults)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme applies SchemeBuilder.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ThinLVMArgs{})
	return nil
}
