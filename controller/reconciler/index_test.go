package reconciler

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

func pinned(driver string, terms ...[]corev1.NodeSelectorRequirement) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "pvc-x"}}}}
	if terms != nil {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{}}
		for _, t := range terms {
			pv.Spec.NodeAffinity.Required.NodeSelectorTerms = append(pv.Spec.NodeAffinity.Required.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: t})
		}
	}
	return pv
}

func in(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

// pvNodes keys the node cleanup's index of PVs: only thinlvm PVs, only a
// single node named with thinlvm's topology key and In, as onNode did.
func TestPVNodes(t *testing.T) {
	key := thinlvmv1.TopologyKey
	for name, c := range map[string]struct {
		pv   *corev1.PersistentVolume
		want []string
	}{
		"pinned":               {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{in(key, "n1")}), []string{"n1"}},
		"another driver":       {pinned("other.csi.example.com", []corev1.NodeSelectorRequirement{in(key, "n1")}), nil},
		"no affinity":          {pinned(thinlvmv1.DriverName), nil},
		"not CSI":              {&corev1.PersistentVolume{}, nil},
		"another key":          {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{in("kubernetes.io/hostname", "n1")}), nil},
		"two values":           {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{in(key, "n1", "n2")}), nil},
		"NotIn":                {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}}}), nil},
		"among other terms":    {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{in("zone", "a")}, []corev1.NodeSelectorRequirement{in("zone", "b"), in(key, "n2")}), []string{"n2"}},
		"two terms, two nodes": {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{in(key, "n1")}, []corev1.NodeSelectorRequirement{in(key, "n2")}), []string{"n1", "n2"}},
		"the same node twice":  {pinned(thinlvmv1.DriverName, []corev1.NodeSelectorRequirement{in(key, "n1")}, []corev1.NodeSelectorRequirement{in(key, "n1")}), []string{"n1"}},
		"no required affinity": {&corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{}, PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName}}}}, nil},
		"not a PV":             {nil, nil},
	} {
		var got []string
		if c.pv == nil {
			got = pvNodes(&corev1.Node{})
		} else {
			got = pvNodes(c.pv)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: pvNodes = %v, want %v", name, got, c.want)
		}
	}
}

// baseImages keys the LVMNode indexes by the images named in the node's
// bases, whatever their state or LV, each once.
func TestBaseImages(t *testing.T) {
	n := &thinlvmv1.LVMNode{Status: thinlvmv1.LVMNodeStatus{GoldenBases: []thinlvmv1.GoldenBaseStatus{
		{Name: "ubuntu", LV: "golden-old", State: thinlvmv1.GoldenBaseFailed},
		{Name: "fedora", LV: "golden-f", State: thinlvmv1.GoldenBasePopulating},
		{Name: "ubuntu", LV: "golden-new", State: thinlvmv1.GoldenBaseReady},
	}}}
	if got := baseImages(n); !slices.Equal(got, []string{"ubuntu", "fedora"}) {
		t.Errorf("baseImages = %v, want [ubuntu fedora]", got)
	}
	if got := baseImages(&thinlvmv1.LVMNode{}); got != nil {
		t.Errorf("baseImages of a node without bases = %v", got)
	}
	if got := baseImages(&corev1.Node{}); got != nil {
		t.Errorf("baseImages of a Node = %v", got)
	}
}
