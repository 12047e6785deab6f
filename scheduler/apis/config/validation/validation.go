// Package validation checks the ThinLVM plugin's internal args and reports
// every problem with its field path, as kube-scheduler validates its own
// plugin args. It changes nothing.
package validation

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// MaxWeight bounds every weight, so that weighted sums stay far from
// overflow.
const MaxWeight = 100

// ValidateThinLVMArgs validates args found at path.
func ValidateThinLVMArgs(path *field.Path, args *config.ThinLVMArgs) error {
	var errs field.ErrorList
	switch args.CapacityStrategy {
	case config.LeastAllocated, config.MostAllocated:
	default:
		errs = append(errs, field.NotSupported(path.Child("capacityStrategy"), args.CapacityStrategy,
			[]string{string(config.LeastAllocated), string(config.MostAllocated)}))
	}
	// In a stable order: the fields', then the classes' sorted.
	for _, f := range []struct {
		name string
		w    int64
	}{{"capacityWeight", args.CapacityWeight}, {"localityWeight", args.LocalityWeight}} {
		if f.w < 0 || f.w > MaxWeight {
			errs = append(errs, field.Invalid(path.Child(f.name), f.w, "must be in [0, 100]"))
		}
	}
	if args.CapacityWeight == 0 && args.LocalityWeight == 0 {
		errs = append(errs, field.Invalid(path.Child("capacityWeight"), args.CapacityWeight, "capacityWeight and localityWeight cannot both be 0"))
	}
	for _, class := range slices.Sorted(maps.Keys(args.DeviceClassWeights)) {
		if w := args.DeviceClassWeights[class]; w < 0 || w > MaxWeight {
			errs = append(errs, field.Invalid(path.Child("deviceClassWeights").Key(class), w, "must be in [0, 100]"))
		}
	}
	if args.ReservationTTL.Duration <= 0 {
		errs = append(errs, field.Invalid(path.Child("reservationTTL"), args.ReservationTTL.Duration.String(), "must be > 0"))
	}
	return errs.ToAggregate()
}
