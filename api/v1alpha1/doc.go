// Package v1alpha1 holds thinlvm's API types (group thinlvm.io): LogicalVolume
// and LVMNode. The CRD YAML and deepcopy functions are generated from them by
// controller-gen (make generate). It holds types and markers only, no logic.
//
// +kubebuilder:object:generate=true
// +groupName=thinlvm.io
package v1alpha1
