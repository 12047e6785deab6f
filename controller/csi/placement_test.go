package csi

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

const gib = int64(1) << 30

func lvmNode(name string, classes []thinlvmv1.DeviceClassStatus, bases ...thinlvmv1.GoldenBaseStatus) thinlvmv1.LVMNode {
	return thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: thinlvmv1.LVMNodeStatus{DeviceClasses: classes, GoldenBases: bases}}
}

func ssd(available string) []thinlvmv1.DeviceClassStatus {
	return []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true, Available: resource.MustParse(available)}}
}

// The nodes of the placement tests: n1 has 10Gi available in ssd, n2
// 100Gi, n3 2Gi; hdd-only reports one class, hdd; blank reports none yet.
// A node named in requirements without an LVMNode has not reported at all.
func placementNodes(bases map[string]thinlvmv1.GoldenBaseStatus) []thinlvmv1.LVMNode {
	var nodes []thinlvmv1.LVMNode
	for _, n := range []struct{ name, available string }{{"n1", "10Gi"}, {"n2", "100Gi"}, {"n3", "2Gi"}} {
		var b []thinlvmv1.GoldenBaseStatus
		if base, ok := bases[n.name]; ok {
			b = append(b, base)
		}
		nodes = append(nodes, lvmNode(n.name, ssd(n.available), b...))
	}
	return append(nodes,
		lvmNode("hdd-only", []thinlvmv1.DeviceClassStatus{{Name: "hdd", Available: resource.MustParse("50Gi")}}),
		lvmNode("blank", nil))
}

func TestPlace(t *testing.T) {
	ubuntu := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", UID: "u2"}, Spec: thinlvmv1.GoldenImageSpec{Size: resource.MustParse("4Gi")}}
	stale := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", UID: "u1"}}
	base := func(img *thinlvmv1.GoldenImage, state thinlvmv1.GoldenBaseState) thinlvmv1.GoldenBaseStatus {
		return thinlvmv1.GoldenBaseStatus{Name: "ubuntu", LV: thinlvmv1.BaseLVName(img), Size: resource.MustParse("4Gi"), State: state}
	}
	tests := []struct {
		name       string
		bases      map[string]thinlvmv1.GoldenBaseStatus
		candidates []string
		class      string
		want       int64
		golden     bool
		node       string
		code       codes.Code
		msg        string
	}{
		// One candidate: the scheduler's choice under --strict-topology.
		{name: "one candidate with room", candidates: []string{"n1"}, want: gib, node: "n1"},
		{name: "one candidate without room: taken, lvmd decides", candidates: []string{"n3"}, want: 50 * gib, node: "n3"},
		{name: "one candidate lacking the base and its room: taken", candidates: []string{"n3"}, want: gib, golden: true, node: "n3"},
		{name: "one candidate not reporting yet", candidates: []string{"new"}, want: gib, node: "new"},
		{name: "one candidate reporting no classes yet", candidates: []string{"blank"}, want: gib, node: "blank"},
		{name: "one candidate without the class", candidates: []string{"hdd-only"}, class: "ssd", want: gib, code: codes.InvalidArgument, msg: `device class "ssd" is not on node(s) [hdd-only]`},
		{name: "one candidate without a named class", candidates: []string{"n1"}, class: "nvme", want: gib, code: codes.InvalidArgument, msg: `device class "nvme" is not on node(s) [n1]`},

		// Several candidates: in order, the first with room.
		{name: "first with room", candidates: []string{"n1", "n2"}, want: gib, node: "n1"},
		{name: "first without room: the next", candidates: []string{"n1", "n2"}, want: 20 * gib, node: "n2"},
		{name: "none with room", candidates: []string{"n1", "n3"}, want: 50 * gib, code: codes.ResourceExhausted, msg: "no node of [n1 n3] has 53687091200 bytes"},
		{name: "one without the class is passed over", candidates: []string{"hdd-only", "n1"}, class: "ssd", want: gib, node: "n1"},
		{name: "none has the class", candidates: []string{"hdd-only", "n1"}, class: "nvme", want: gib, code: codes.InvalidArgument, msg: `device class "nvme" is not on node(s) [hdd-only n1]`},
		{name: "without the class or room", candidates: []string{"hdd-only", "n3"}, class: "ssd", want: 50 * gib, code: codes.ResourceExhausted},
		{name: "a node not reporting yet gets the benefit of the doubt", candidates: []string{"n3", "new"}, want: 50 * gib, node: "new"},

		// No candidates: the most room.
		{name: "no requirements: the most room", want: gib, node: "n2"},
		{name: "no requirements, no room anywhere", want: 200 * gib, code: codes.ResourceExhausted},
		{name: "no requirements, a class no node reports", class: "nvme", want: gib, code: codes.ResourceExhausted, msg: `no node reports device class "nvme"`},

		// Golden images: holders of the base Ready first; a missing base
		// takes room.
		{name: "base Ready on the second candidate", bases: map[string]thinlvmv1.GoldenBaseStatus{"n2": base(ubuntu, thinlvmv1.GoldenBaseReady)},
			candidates: []string{"n1", "n2"}, want: gib, golden: true, node: "n2"},
		{name: "base Populating is not Ready", bases: map[string]thinlvmv1.GoldenBaseStatus{"n2": base(ubuntu, thinlvmv1.GoldenBasePopulating)},
			candidates: []string{"n1", "n2"}, want: gib, golden: true, node: "n1"},
		{name: "a stale base of a deleted image is no base", bases: map[string]thinlvmv1.GoldenBaseStatus{"n2": base(stale, thinlvmv1.GoldenBaseReady)},
			candidates: []string{"n1", "n2"}, want: gib, golden: true, node: "n1"},
		{name: "no requirements: a holder before more room", bases: map[string]thinlvmv1.GoldenBaseStatus{"n1": base(ubuntu, thinlvmv1.GoldenBaseReady)},
			want: gib, golden: true, node: "n1"},
		{name: "the missing base's size counts", candidates: []string{"n1", "n2"}, want: 7 * gib, golden: true, node: "n2"},
		{name: "a Populating base's size is counted already", bases: map[string]thinlvmv1.GoldenBaseStatus{"n1": base(ubuntu, thinlvmv1.GoldenBasePopulating)},
			candidates: []string{"n1", "n2"}, want: 7 * gib, golden: true, node: "n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var images []*thinlvmv1.GoldenImage
			if tt.golden {
				images = append(images, ubuntu)
			}
			node, err := place(placementNodes(tt.bases), tt.candidates, tt.class, tt.want, images)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("place: %v, want code %v saying %q", err, tt.code, tt.msg)
			}
			if node != tt.node {
				t.Errorf("placed on %q, want %q", node, tt.node)
			}
		})
	}
}

// A clone or restore goes to the scheduler's choice, else to its source's
// node when the requirements allow it; otherwise it is placed as any
// volume is.
func TestPlaceCopy(t *testing.T) {
	tests := []struct {
		name       string
		candidates []string
		node       string
		decided    bool
	}{
		{"no requirements", nil, "n1", true},
		{"among the candidates", []string{"n2", "n1"}, "n1", true},
		{"the scheduler chose the source's node", []string{"n1"}, "n1", true},
		{"the scheduler chose another node", []string{"n2"}, "n2", true},
		{"excluded", []string{"n2", "n3"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, ok := forCopy("n1", tt.candidates)
			if node != tt.node || ok != tt.decided {
				t.Fatalf("forCopy = %q, %v; want %q, %v", node, ok, tt.node, tt.decided)
			}
		})
	}
}

func TestPlaceTopologyNodes(t *testing.T) {
	top := func(nodes ...string) []*csi.Topology {
		var out []*csi.Topology
		for _, n := range nodes {
			out = append(out, &csi.Topology{Segments: map[string]string{thinlvmv1.TopologyKey: n}})
		}
		return out
	}
	tests := []struct {
		name string
		ar   *csi.TopologyRequirement
		want []string
	}{
		{"none", nil, nil},
		{"strict topology: the one node in both", &csi.TopologyRequirement{Preferred: top("n2"), Requisite: top("n2")}, []string{"n2"}},
		{"preferred first, each once", &csi.TopologyRequirement{Preferred: top("n2", "n1"), Requisite: top("n1", "n2", "n3")}, []string{"n2", "n1", "n3"}},
		{"segments without the key are skipped", &csi.TopologyRequirement{Requisite: append(top("n1"), &csi.Topology{Segments: map[string]string{"zone": "a"}})}, []string{"n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, topologyNodes(tt.ar)); diff != "" {
				t.Errorf("topologyNodes (-want +got):\n%s", diff)
			}
		})
	}
}
