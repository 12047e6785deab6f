// Package v1alpha1 holds thinlvm's API types (group thinlvm.io):
// LogicalVolume, LVMNode and GoldenImage. The CRD YAML and deepcopy
// functions are generated from them by controller-gen (make generate).
// Beside the types it holds the two readings every part shares: the names
// derived from objects (names.go) and how an LVMNode's status is read for
// placement (placement.go).
//
// +kubebuilder:object:generate=true
// +groupName=thinlvm.io
package v1alpha1
