package plugin

import (
	"context"
	"fmt"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
)

// BenchmarkFilterScorePerNode is the plugin's cost per node and scheduling
// cycle on a 1,000-node cluster: one Filter and one Score call, for a pod
// with one 1 GiB claim of a golden-image class (base Ready on 100 nodes).
func BenchmarkFilterScorePerNode(b *testing.B) {
	f := newFake()
	gi := f.addImage("ubuntu", "6f1c0a8e-8a53-4d0e-9a43-5c7f3e1d2b9a", "", "4Gi")
	var nodes []fwk.NodeInfo
	for i := range 1000 {
		name := fmt.Sprintf("n%04d", i)
		var bases []thinlvmv1.GoldenBaseStatus
		if i%10 == 0 {
			bases = append(bases, goldenBase(gi, thinlvmv1.GoldenBaseReady))
		}
		f.addNode(name, "100Gi", "100Gi", bases...)
		nodes = append(nodes, nodeInfo(name))
	}
	f.addClaim("root", "golden", "1Gi")
	idx := newNodeIndex()
	for _, ln := range f.nodes {
		idx.set(ln)
	}
	p := NewWithLister(defaultArgs(), indexed{f, idx})
	pod := podWith("vm", "root")
	state := framework.NewCycleState()
	if _, st := p.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
		b.Fatal(st)
	}
	b.ResetTimer()
	for i := range b.N {
		ni := nodes[i%len(nodes)]
		if st := p.Filter(context.Background(), state, pod, ni); !st.IsSuccess() {
			b.Fatal(st)
		}
		if _, st := p.Score(context.Background(), state, pod, ni); !st.IsSuccess() {
			b.Fatal(st)
		}
	}
}

// indexed reads the nodes through the plugin's own index, as in the
// scheduler, and the rest from the fake.
type indexed struct {
	*fakeLister
	idx *nodeIndex
}

func (l indexed) Node(name string) (*NodeState, error) {
	if n := l.idx.node(name); n != nil {
		return n, nil
	}
	return nil, notFound("lvmnodes", name)
}
