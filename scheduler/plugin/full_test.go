package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// A device class that takes no new volumes, whatever their size, is full:
// Filter refuses it with the reason, though its bytes would fit.
func TestFilterFullDeviceClass(t *testing.T) {
	vgMeta := func(left int32) *thinlvmv1.VGMetadataStatus {
		return &thinlvmv1.VGMetadataStatus{Size: resource.MustParse("1020Ki"), Free: resource.MustParse("9Ki"), LVsLeft: left}
	}
	tests := []struct {
		name   string
		set    func(dc *thinlvmv1.DeviceClassStatus)
		claims int
		image  bool // the pod's volume is made from a golden image whose base the node lacks
		code   fwk.Code
		msg    []string
	}{
		{name: "room", set: func(dc *thinlvmv1.DeviceClassStatus) { dc.VGMetadata = vgMeta(5) }, claims: 2},
		{name: "not reported (an older node agent)", claims: 2},
		{name: "exactly the LVs left", set: func(dc *thinlvmv1.DeviceClassStatus) { dc.VGMetadata = vgMeta(2) }, claims: 2},
		{
			name: "VG metadata area full", set: func(dc *thinlvmv1.DeviceClassStatus) { dc.VGMetadata = vgMeta(0) }, claims: 1,
			code: fwk.Unschedulable,
			msg:  []string{`the metadata area of volume group "vg0" has room for 0 more volumes (9Ki of 1020Ki free), the pod needs 1`},
		},
		{
			name: "fewer LVs left than the pod's volumes", set: func(dc *thinlvmv1.DeviceClassStatus) { dc.VGMetadata = vgMeta(2) }, claims: 3,
			code: fwk.Unschedulable, msg: []string{"room for 2 more volumes", "the pod needs 3"},
		},
		{
			name: "a missing base is one more LV", set: func(dc *thinlvmv1.DeviceClassStatus) { dc.VGMetadata = vgMeta(2) }, claims: 2, image: true,
			code: fwk.Unschedulable, msg: []string{"room for 2 more volumes", "the pod needs 3"},
		},
		{
			name: "thin pool metadata over the high-water mark",
			set: func(dc *thinlvmv1.DeviceClassStatus) {
				dc.OverHighWatermark, dc.DataPercent, dc.MetadataPercent = true, "10.00", "81.50"
			},
			claims: 1, code: fwk.Unschedulable,
			msg: []string{`thinlvm device class "ssd" takes no new volumes: thin pool vg0/pool is over its high-water mark (data 10.00%, metadata 81.50%)`},
		},
		{
			name: "thin pool read-only",
			set: func(dc *thinlvmv1.DeviceClassStatus) {
				dc.PoolHealth, dc.MetadataPercent = thinlvmv1.ThinPoolMetadataReadOnly, "100.00"
			},
			claims: 1, code: fwk.Unschedulable, msg: []string{"thin pool vg0/pool is MetadataReadOnly"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.addNode("n1", "100Gi", "100Gi")
			dc := &f.nodes["n1"].Status.DeviceClasses[0]
			dc.VolumeGroup, dc.ThinPool = "vg0", "pool"
			if tt.set != nil {
				tt.set(dc)
			}
			class := "thin"
			if tt.image {
				f.addImage("ubuntu", "u-1", "", "1Gi")
				class = "golden"
			}
			var claims []string
			for i := range tt.claims {
				claims = append(claims, fmt.Sprintf("c%d", i))
				f.addClaim(claims[i], class, "1Gi")
			}
			p := NewWithLister(defaultArgs(), f)
			_, _, st := cycle(t, p, podWith("p", claims...), "n1")
			if got := st["n1"].Code(); got != tt.code {
				t.Fatalf("Filter: %v, want code %v", st["n1"], tt.code)
			}
			for _, m := range tt.msg {
				if !strings.Contains(st["n1"].Message(), m) {
					t.Errorf("Filter's reason %q lacks %q", st["n1"].Message(), m)
				}
			}
		})
	}
}

// Reservations count against the LVs left, as they do against the bytes:
// a burst of pods cannot all take the last room in a VG's metadata area.
func TestReserveCountsLVsLeft(t *testing.T) {
	f := newFake()
	f.addNode("n1", "100Gi", "100Gi")
	f.nodes["n1"].Status.DeviceClasses[0].VGMetadata = &thinlvmv1.VGMetadataStatus{
		Size: resource.MustParse("1020Ki"), Free: resource.MustParse("10Ki"), LVsLeft: 3}
	p := NewWithLister(defaultArgs(), f)
	for i := range 4 {
		claim := fmt.Sprintf("c%d", i)
		f.addClaim(claim, "thin", "1Gi")
		pod := podWith(fmt.Sprintf("pod-%d", i), claim)
		state, _, st := cycle(t, p, pod, "n1")
		if i == 3 {
			if st["n1"].Code() != fwk.Unschedulable || !strings.Contains(st["n1"].Message(), "room for 0 more volumes") {
				t.Errorf("the 4th pod on 3 LVs left: %v", st["n1"])
			}
			break
		}
		if !st["n1"].IsSuccess() {
			t.Fatalf("pod %d: %v", i, st["n1"])
		}
		if st := p.Reserve(context.Background(), state, pod, "n1"); !st.IsSuccess() {
			t.Fatal(st)
		}
	}
	p.Unreserve(context.Background(), nil, podWith("pod-0"), "n1")
	if _, _, st := cycle(t, p, podWith("pod-3", "c3"), "n1"); !st["n1"].IsSuccess() {
		t.Errorf("after an Unreserve: %v", st["n1"])
	}
}
