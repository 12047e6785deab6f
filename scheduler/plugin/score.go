package plugin

import (
	"context"
	"math"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// capacityScore rates the room left after placing need bytes into free
// bytes of a total: spread (LeastAllocated) prefers more room left,
// bin-pack (MostAllocated) less.
func capacityScore(strategy config.CapacityStrategy, free, need, total int64) int64 {
	if total <= 0 || need > free {
		return 0
	}
	// In floating point: (free-need)*100 overflows int64 past 92 PB, and
	// free comes from a status a node writes.
	left := int64(float64(free-need) / float64(total) * float64(maxScore))
	left = min(max(left, 0), maxScore)
	if strategy == config.MostAllocated {
		return maxScore - left
	}
	return left
}

// localityScore rates a node for one golden base, whose state there is
// state ("" for none), in the spirit of the in-tree ImageLocality plugin:
// full marks where the base is Ready, half where it is being populated,
// nothing where it is missing or Failed; scaled by how widely the base is
// spread (from half, held by one node, to full, held by all), so that a
// base held by few nodes does not pull every VM onto them.
func localityScore(state thinlvmv1.GoldenBaseState, holders, nodes int) int64 {
	if nodes <= 0 || !state.Held() {
		return 0
	}
	s := int64(maxScore)
	if state == thinlvmv1.GoldenBasePopulating {
		s /= 2
	}
	holders = min(max(holders, 1), nodes)
	return s/2 + s*int64(holders)/int64(2*nodes)
}

// copyScore is the locality of a clone or restore on a node: its source's
// node makes it an O(1) thin snapshot; a node holding the golden base the
// source descends from receives only what differs from the base; any
// other node receives all the source maps.
func copyScore(sourceNode, holdsBase bool) int64 {
	switch {
	case sourceNode:
		return maxScore
	case holdsBase:
		return maxScore / 2
	}
	return 0
}

// combine weighs the two parts into one score in [0, 100].
func combine(capacity, locality, capacityWeight, localityWeight int64) int64 {
	w := capacityWeight + localityWeight
	if w == 0 {
		return 0
	}
	return (capacity*capacityWeight + locality*localityWeight) / w
}

// normalize scales scores so that the best is maxScore.
func normalize(scores []int64) {
	var top int64
	for _, s := range scores {
		top = max(top, s)
	}
	if top == 0 {
		return
	}
	for i := range scores {
		scores[i] = scores[i] * maxScore / top
	}
}

// PreScore skips Score for a pod with no thinlvm demand in this cycle.
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	d, st := demandFrom(state)
	if st != nil {
		return st
	}
	if d == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score weighs free space (spread or bin-pack, per device class weights)
// and golden-base locality.
func (p *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	d, st := demandFrom(state)
	if st != nil || d == nil {
		return 0, st
	}
	node := ni.Node().Name
	n, err := p.lister.Node(node)
	if err != nil {
		return 0, nil
	}
	var capSum, weightSum int64
	for _, cd := range d.classes {
		c := n.class(cd.class)
		if c == nil {
			continue
		}
		w, ok := p.args.DeviceClassWeights[c.name]
		if !ok {
			w = 1
		}
		capSum += w * capacityScore(p.args.CapacityStrategy, c.available-p.ledger.reserved(node, c.name).bytes, cd.bytes, c.capacity)
		weightSum += w
	}
	var capScore int64
	if weightSum > 0 {
		capScore = capSum / weightSum
	}
	var locScore int64
	for _, gi := range d.images {
		locScore += localityScore(n.LVMNode.Status.BaseState(gi), d.holders[gi.Name], d.nodes)
	}
	parts := int64(len(d.images))
	if d.sourceNode != "" {
		locScore += copyScore(node == d.sourceNode, d.sourceBase != nil && n.LVMNode.Status.BaseState(d.sourceBase) == thinlvmv1.GoldenBaseReady)
		parts++
	}
	if parts > 0 {
		locScore /= parts
	}
	score := combine(capScore, locScore, p.args.CapacityWeight, p.args.LocalityWeight)
	// klog.V first: FromContext walks the context for every node.
	if klog.V(5).Enabled() {
		klog.FromContext(ctx).V(5).Info("thinlvm score", "pod", klog.KObj(pod), "node", klog.KRef("", node), "capacity", capScore, "locality", locScore, "score", score)
	}
	return score, nil
}

// poolCapacity is the most a device class can ever hold: its pool times
// the overprovision ratio, saturated at the largest int64; a thick class
// (no pool), its volume group's size.
func poolCapacity(dc *thinlvmv1.DeviceClassStatus) int64 {
	if dc.Type == thinlvmv1.DeviceClassThick {
		return dc.VGSize.Value()
	}
	c := float64(dc.PoolSize.Value()) * ratio(dc.OverprovisionRatio)
	if c >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(c)
}

func ratio(s string) float64 {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r < 1 {
		return 1
	}
	return r
}

// ScoreExtensions implements the framework's ScorePlugin.
func (p *Plugin) ScoreExtensions() scoreExtensions { return p }

// NormalizeScore scales the best node to the framework's maximum.
func (p *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, scores nodeScoreList) *fwk.Status {
	s := make([]int64, len(scores))
	for i := range scores {
		s[i] = scores[i].Score
	}
	normalize(s)
	for i := range scores {
		scores[i].Score = s[i]
	}
	return nil
}
