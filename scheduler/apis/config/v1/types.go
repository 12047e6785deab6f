package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ThinLVMArgs are the ThinLVM plugin's arguments as written in a
// KubeSchedulerConfiguration.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ThinLVMArgs struct {
	metav1.TypeMeta `json:",inline"`

	// DeviceClassWeights weigh the free-space score per device class.
	// +optional
	DeviceClassWeights map[string]int64 `json:"deviceClassWeights,omitempty"`
	// CapacityStrategy is LeastAllocated (default: spread) or MostAllocated
	// (bin-pack).
	// +optional
	CapacityStrategy *string `json:"capacityStrategy,omitempty"`
	// CapacityWeight weighs free space in the score; default 1.
	// +optional
	CapacityWeight *int64 `json:"capacityWeight,omitempty"`
	// LocalityWeight weighs golden-base locality in the score; default 2.
	// +optional
	LocalityWeight *int64 `json:"localityWeight,omitempty"`
	// ReservationTTL bounds how long reserved bytes stay in the ledger;
	// default 5m.
	// +optional
	ReservationTTL *metav1.Duration `json:"reservationTTL,omitempty"`
}
