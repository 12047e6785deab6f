package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CapacityStrategy is how free space scores a node.
type CapacityStrategy string

// Capacity strategies.
const (
	// LeastAllocated prefers the node with the most room (spread).
	LeastAllocated CapacityStrategy = "LeastAllocated"
	// MostAllocated prefers the node with the least room that fits
	// (bin-pack).
	MostAllocated CapacityStrategy = "MostAllocated"
)

// ThinLVMArgs are the ThinLVM plugin's arguments.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ThinLVMArgs struct {
	metav1.TypeMeta

	// DeviceClassWeights weigh the free-space score of each device class;
	// a class not listed weighs 1.
	DeviceClassWeights map[string]int64
	// CapacityStrategy is LeastAllocated or MostAllocated.
	CapacityStrategy CapacityStrategy
	// CapacityWeight and LocalityWeight weigh the two parts of the score.
	CapacityWeight int64
	LocalityWeight int64
	// ReservationTTL bounds how long bytes reserved for a pod stay in the
	// ledger when the node's LVMNode does not show the volume.
	ReservationTTL metav1.Duration
}

// GroupName is kube-scheduler's configuration group, where plugin args live.
const GroupName = "kubescheduler.config.k8s.io"

// SchemeGroupVersion is the internal version of the group.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// AddToScheme registers the internal type.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ThinLVMArgs{})
	return nil
}
