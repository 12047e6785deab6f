package plugin

import (
	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

// maxScore is the framework's node score range, 0 to 100.
const maxScore = 100

// capacityScore rates the room left after placing need bytes into free
// bytes of a total: spread (LeastAllocated) prefers more room left,
// bin-pack (MostAllocated) less.
func capacityScore(strategy config.CapacityStrategy, free, need, total int64) int64 {
	if total <= 0 || need > free {
		return 0
	}
	// In floating point: (free-need)*100 overflows int64 past 92 PB, and
	// free comes from a status a node writes.
	left := int64(float64(free-need) / float64(total) * maxScore)
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
