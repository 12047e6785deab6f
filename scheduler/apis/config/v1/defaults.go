package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// SetDefaults_ThinLVMArgs fills unset fields (registered by the generated
// RegisterDefaults).
func SetDefaults_ThinLVMArgs(a *ThinLVMArgs) { //nolint:revive // defaulter-gen's naming
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
