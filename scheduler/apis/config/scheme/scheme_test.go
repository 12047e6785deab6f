package scheme_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/thinlvm/thinlvm/scheduler/apis/config"
	_ "github.com/thinlvm/thinlvm/scheduler/apis/config/scheme"
)

// A KubeSchedulerConfiguration's ThinLVM args decode through kube-scheduler's
// scheme: the generated defaulters fill what is unset, the generated and
// hand-written conversions make the internal args.
func TestArgsDecodeDefaultAndConvert(t *testing.T) {
	for _, c := range []struct {
		name, args string
		want       config.ThinLVMArgs
	}{{
		name: "empty",
		args: `{}`,
		want: config.ThinLVMArgs{CapacityStrategy: config.LeastAllocated, CapacityWeight: 1, LocalityWeight: 2,
			ReservationTTL: metav1.Duration{Duration: 5 * time.Minute}},
	}, {
		name: "set",
		args: `{capacityStrategy: MostAllocated, deviceClassWeights: {ssd: 3}, capacityWeight: 4, localityWeight: 0, reservationTTL: 30s}`,
		want: config.ThinLVMArgs{CapacityStrategy: config.MostAllocated, DeviceClassWeights: map[string]int64{"ssd": 3},
			CapacityWeight: 4, LocalityWeight: 0, ReservationTTL: metav1.Duration{Duration: 30 * time.Second}},
	}} {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: thinlvm-scheduler
  pluginConfig:
  - name: ThinLVM
    args: ` + c.args + "\n")
			obj, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got *config.ThinLVMArgs
			for _, pc := range obj.(*kubeschedulerconfig.KubeSchedulerConfiguration).Profiles[0].PluginConfig {
				if pc.Name == "ThinLVM" {
					got, _ = pc.Args.(*config.ThinLVMArgs)
				}
			}
			if got == nil {
				t.Fatal("no internal ThinLVMArgs in the decoded profile")
			}
			got.TypeMeta = metav1.TypeMeta{}
			if diff := cmp.Diff(c.want, *got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			cp := got.DeepCopyObject().(*config.ThinLVMArgs)
			if cp.DeviceClassWeights != nil {
				cp.DeviceClassWeights["ssd"] = 99
				if got.DeviceClassWeights["ssd"] == 99 {
					t.Error("DeepCopyObject shares the weights")
				}
			}
		})
	}
}
