package validation

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

func valid() config.ThinLVMArgs {
	return config.ThinLVMArgs{CapacityStrategy: config.LeastAllocated, CapacityWeight: 1, LocalityWeight: 2,
		ReservationTTL: metav1.Duration{Duration: time.Minute}}
}

func TestValidateThinLVMArgs(t *testing.T) {
	path := field.NewPath("profiles").Index(0).Child("pluginConfig").Index(0).Child("args")
	tests := []struct {
		name   string
		mutate func(*config.ThinLVMArgs)
		want   field.ErrorList
	}{
		{"valid", func(*config.ThinLVMArgs) {}, nil},
		{"unknown strategy", func(a *config.ThinLVMArgs) { a.CapacityStrategy = "Random" },
			field.ErrorList{field.NotSupported(path.Child("capacityStrategy"), config.CapacityStrategy("Random"), []string{"LeastAllocated", "MostAllocated"})}},
		{"negative weight", func(a *config.ThinLVMArgs) { a.LocalityWeight = -1 },
			field.ErrorList{field.Invalid(path.Child("localityWeight"), int64(-1), "must be in [0, 100]")}},
		{"both weights 0", func(a *config.ThinLVMArgs) { a.CapacityWeight, a.LocalityWeight = 0, 0 },
			field.ErrorList{field.Invalid(path.Child("capacityWeight"), int64(0), "capacityWeight and localityWeight cannot both be 0")}},
		{"class weight too big", func(a *config.ThinLVMArgs) { a.DeviceClassWeights = map[string]int64{"nvme": 101} },
			field.ErrorList{field.Invalid(path.Child("deviceClassWeights").Key("nvme"), int64(101), "must be in [0, 100]")}},
		// Several at once, in a stable order (the map of classes is
		// walked sorted): the test runs each case 20 times.
		{"several, in order", func(a *config.ThinLVMArgs) {
			a.CapacityWeight, a.LocalityWeight = 101, -1
			a.DeviceClassWeights = map[string]int64{"ssd": -2, "hdd": 200, "nvme": 300, "ok": 5}
		}, field.ErrorList{
			field.Invalid(path.Child("capacityWeight"), int64(101), "must be in [0, 100]"),
			field.Invalid(path.Child("localityWeight"), int64(-1), "must be in [0, 100]"),
			field.Invalid(path.Child("deviceClassWeights").Key("hdd"), int64(200), "must be in [0, 100]"),
			field.Invalid(path.Child("deviceClassWeights").Key("nvme"), int64(300), "must be in [0, 100]"),
			field.Invalid(path.Child("deviceClassWeights").Key("ssd"), int64(-2), "must be in [0, 100]"),
		}},
		{"no ttl", func(a *config.ThinLVMArgs) { a.ReservationTTL = metav1.Duration{} },
			field.ErrorList{field.Invalid(path.Child("reservationTTL"), "0s", "must be > 0")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 20 {
				a := valid()
				tt.mutate(&a)
				err := ValidateThinLVMArgs(path, &a)
				var got field.ErrorList
				if err != nil {
					for _, e := range err.(interface{ Errors() []error }).Errors() { //nolint:errorlint // the aggregate ValidateThinLVMArgs returns, unwrapped
						got = append(got, e.(*field.Error)) //nolint:errorlint // its items, unwrapped
					}
				}
				if d := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(field.Error{}, "Detail", "Origin", "CoveredByDeclarative")); d != "" {
					t.Fatalf("errors (-want +got):\n%s", d)
				}
			}
		})
	}
}
