package plugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/scheduler/apis/config"
)

func TestCapacityScore(t *testing.T) {
	tests := []struct {
		name              string
		strategy          config.CapacityStrategy
		free, need, total int64
		want              int64
	}{
		{"spread: empty node", config.LeastAllocated, 100, 10, 100, 90},
		{"spread: half full", config.LeastAllocated, 50, 10, 100, 40},
		{"bin-pack: empty node", config.MostAllocated, 100, 10, 100, 10},
		{"bin-pack: half full", config.MostAllocated, 50, 10, 100, 60},
		{"does not fit", config.LeastAllocated, 5, 10, 100, 0},
		{"no total", config.LeastAllocated, 5, 1, 0, 0},
		{"free over total (autoextend)", config.LeastAllocated, 300, 10, 100, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := capacityScore(tt.strategy, tt.free, tt.need, tt.total); got != tt.want {
				t.Errorf("capacityScore = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLocalityScore(t *testing.T) {
	tests := []struct {
		name           string
		state          thinlvmv1.GoldenBaseState
		holders, nodes int
		want           int64
	}{
		{"ready everywhere", thinlvmv1.GoldenBaseReady, 5, 5, 100},
		{"ready on 2 of 5: damped", thinlvmv1.GoldenBaseReady, 2, 5, 70},
		{"ready on 1 of 10", thinlvmv1.GoldenBaseReady, 1, 10, 55},
		{"populating on 2 of 5", thinlvmv1.GoldenBasePopulating, 2, 5, 35},
		{"failed", thinlvmv1.GoldenBaseFailed, 2, 5, 0},
		{"missing", "", 2, 5, 0},
		{"no nodes", thinlvmv1.GoldenBaseReady, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := localityScore(tt.state, tt.holders, tt.nodes); got != tt.want {
				t.Errorf("localityScore = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestCombineAndNormalize(t *testing.T) {
	if got := combine(90, 40, 1, 2); got != (90+80)/3 {
		t.Errorf("combine = %d", got)
	}
	if got := combine(90, 40, 0, 0); got != 0 {
		t.Errorf("combine with no weight = %d", got)
	}
	s := []int64{10, 20, 40}
	normalize(s)
	if d := cmp.Diff([]int64{25, 50, 100}, s); d != "" {
		t.Errorf("normalize (-want +got):\n%s", d)
	}
	z := []int64{0, 0}
	normalize(z)
	if d := cmp.Diff([]int64{0, 0}, z); d != "" {
		t.Errorf("normalize zeros: %s", d)
	}
}
