package sizes

import "math"

// Add returns a+b, saturating at math.MaxInt64 and math.MinInt64 instead
// of wrapping.
func Add(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// Sum adds byte counts with Add.
func Sum(v ...int64) int64 {
	var s int64
	for _, x := range v {
		s = Add(s, x)
	}
	return s
}

// Saturated tells whether n is at the limit Add saturates to: a sum that
// reached it is larger than any device holds.
func Saturated(n int64) bool { return n == math.MaxInt64 }
