// Package v1 is the versioned ThinLVM plugin args of
// kubescheduler.config.k8s.io/v1, with their defaults and conversion to the
// internal type. No logic beyond defaulting and conversion.
package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// ThinLVMArgs are the ThinLVM plugin's arguments as written in a
// KubeSchedulerConfiguration.
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

// DeepCopyObject implements runtime.Object.
func (a *ThinLVMArgs) DeepCopyObject() runtime.Object {
	c := *a
	if a.DeviceClassWeights != nil {
		c.DeviceClassWeights = make(map[string]int64, len(a.DeviceClassWeights))
		for k, v := range a.DeviceClassWeights {
			c.DeviceClassWeights[k] = v
		}
	}
	c.CapacityStrategy = copyOf(a.CapacityStrategy)
	c.CapacityWeight = copyOf(a.CapacityWeight)
	c.LocalityWeight = copyOf(a.LocalityWeight)
	c.ReservationTTL = copyOf(a.ReservationTTL)
	return &c
}

func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: config.GroupName, Version: "v1"}

// SetDefaults_ThinLVMArgs fills unset fields.
func SetDefaults_ThinLVMArgs(a *ThinLVMArgs) { //nolint:revive // kube-scheduler's naming
	if a.CapacityStrategy == nil {
		a.CapacityStrategy = ptr.To(string(config.LeastAllocated))
	}
	if a.CapacityWeight == nil {
		a.CapacityWeight = ptr.To[int64](1)
	}
	if a.LocalityWeight == nil {
		a.LocalityWeight = ptr.To[int64](2)
	}
	if a.ReservationTTL == nil {
		a.ReservationTTL = &metav1.Duration{Duration: 5 * time.Minute}
	}
}

// Convert_v1_ThinLVMArgs_To_config_ThinLVMArgs converts defaulted v1 args.
func Convert_v1_ThinLVMArgs_To_config_ThinLVMArgs(in *ThinLVMArgs, out *config.ThinLVMArgs, _ conversion.Scope) error { //nolint:revive
	out.DeviceClassWeights = in.DeviceClassWeights
	out.CapacityStrategy = config.CapacityStrategy(ptr.Deref(in.CapacityStrategy, ""))
	out.CapacityWeight = ptr.Deref(in.CapacityWeight, 0)
	out.LocalityWeight = ptr.Deref(in.LocalityWeight, 0)
	if in.ReservationTTL != nil {
		out.ReservationTTL = *in.ReservationTTL
	}
	return nil
}

// Convert_config_ThinLVMArgs_To_v1_ThinLVMArgs converts internal args back.
func Convert_config_ThinLVMArgs_To_v1_ThinLVMArgs(in *config.ThinLVMArgs, out *ThinLVMArgs, _ conversion.Scope) error { //nolint:revive
	out.DeviceClassWeights = in.DeviceClassWeights
	out.CapacityStrategy = ptr.To(string(in.CapacityStrategy))
	out.CapacityWeight = ptr.To(in.CapacityWeight)
	out.LocalityWeight = ptr.To(in.LocalityWeight)
	out.ReservationTTL = &metav1.Duration{Duration: in.ReservationTTL.Duration}
	return nil
}

// AddToScheme registers the v1 type, its defaults and conversions.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &ThinLVMArgs{})
	s.AddTypeDefaultingFunc(&ThinLVMArgs{}, func(o any) { SetDefaults_ThinLVMArgs(o.(*ThinLVMArgs)) })
	if err := s.AddConversionFunc((*ThinLVMArgs)(nil), (*config.ThinLVMArgs)(nil), func(a, b any, sc conversion.Scope) error {
		return Convert_v1_ThinLVMArgs_To_config_ThinLVMArgs(a.(*ThinLVMArgs), b.(*config.ThinLVMArgs), sc)
	}); err != nil {
		return err
	}
	return s.AddConversionFunc((*config.ThinLVMArgs)(nil), (*ThinLVMArgs)(nil), func(a, b any, sc conversion.Scope) error {
		return Convert_config_ThinLVMArgs_To_v1_ThinLVMArgs(a.(*config.ThinLVMArgs), b.(*ThinLVMArgs), sc)
	})
}
