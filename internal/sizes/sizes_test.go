package sizes

import (
	"math"
	"testing"
)

func TestAdd(t *testing.T) {
	const ei = int64(1) << 60
	for _, tc := range []struct {
		name      string
		a, b      int64
		want      int64
		saturated bool
	}{
		{"small", 1 << 30, 2 << 30, 3 << 30, false},
		{"4Ei and 3Ei", 4 * ei, 3 * ei, 7 * ei, false},
		{"two 4Ei claims would wrap negative", 4 * ei, 4 * ei, math.MaxInt64, true},
		{"max and one", math.MaxInt64, 1, math.MaxInt64, true},
		{"negatives", math.MinInt64, -1, math.MinInt64, false},
		{"mixed signs never saturate", math.MaxInt64, math.MinInt64, -1, false},
		{"zero", 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Add(tc.a, tc.b)
			if got != tc.want || Saturated(got) != tc.saturated {
				t.Errorf("Add(%d, %d) = %d (saturated %v), want %d (%v)", tc.a, tc.b, got, Saturated(got), tc.want, tc.saturated)
			}
		})
	}
	if got := Sum(4*ei, 4*ei, 4*ei); got != math.MaxInt64 {
		t.Errorf("Sum of three 4Ei = %d, want saturated", got)
	}
}
