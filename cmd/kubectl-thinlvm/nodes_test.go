package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// A thick class has no pool: `nodes` shows its VG's size and allocated
// extents as its capacity and use, and "(thick)" for its pool.
func TestNodeClassThick(t *testing.T) {
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	dc := thinlvmv1.DeviceClassStatus{Name: "hdd", Type: thinlvmv1.DeviceClassThick, VolumeGroup: "vg1",
		VGSize: resource.MustParse("100Gi"), VGFree: resource.MustParse("60Gi"), Available: resource.MustParse("50Gi"),
		Virtual: resource.MustParse("40Gi"), LVCount: 3, DataPercent: "0.00", MetadataPercent: "0.00", OverprovisionRatio: "0"}
	n := nodeClass(ln, dc)
	if n.Type != "thick" || n.Capacity.String() != "100Gi" || n.Used.String() != "40Gi" || n.Available.String() != "50Gi" || n.Health != "Ready" || len(n.Warnings) != 0 {
		t.Errorf("nodeClass of a thick class: %+v; want type thick, capacity 100Gi, used 40Gi, 50Gi available, Ready without warnings", n)
	}
	dc.VGFree = resource.MustParse("1Gi")
	dc.Available = resource.Quantity{}
	if n := nodeClass(ln, dc); len(n.Warnings) != 1 || n.Warnings[0] != "no room for a new volume (ThinLVMNoRoom)" {
		t.Errorf("a full thick class's warnings: %q", n.Warnings)
	}
}
