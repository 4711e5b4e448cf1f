package stats

import "slices"

// Median returns the median of xs (the mean of the middle two for an even
// count); xs is not modified. It panics on an empty slice: every caller
// takes at least one sample.
func Median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
