package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUniformDraws checks RandU's counter-based generator: 2^20 float32
// draws fill 256 equal bins as a uniform source does (chi-square with 255
// degrees of freedom below 360, p ≈ 1e-5), neighbours are uncorrelated
// (|r| < 0.01, 10 standard errors), two consecutive draws and two seeds
// give unrelated values, and every dtype stays in [0, 1).
func TestUniformDraws(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	require.NoError(t, d.ManualSeed(11))
	const n = 1 << 20
	first, err := d.RandU(Float32, n).Float32s(ctx)
	require.NoError(t, err)
	second, err := d.RandU(Float32, n).Float32s(ctx)
	require.NoError(t, err)

	var bins [256]float64
	for _, v := range first {
		require.True(t, v >= 0 && v < 1, "value %g outside [0, 1)", v)
		bins[int(v*256)]++
	}
	var chi2 float64
	for _, c := range bins {
		chi2 += (c - n/256.0) * (c - n/256.0) / (n / 256.0)
	}
	assert.Less(t, chi2, 360.0, "chi-square over 256 bins")

	correlation := func(a, b []float32) float64 {
		var sab, sa, sb, saa, sbb float64
		for i := range a {
			x, y := float64(a[i]), float64(b[i])
			sab, sa, sb, saa, sbb = sab+x*y, sa+x, sb+y, saa+x*x, sbb+y*y
		}
		m := float64(len(a))
		return (sab/m - sa/m*sb/m) / math.Sqrt((saa/m-sa/m*sa/m)*(sbb/m-sb/m*sb/m))
	}
	assert.InDelta(t, 0, correlation(first[:n-1], first[1:]), 0.01, "neighbours")
	assert.InDelta(t, 0, correlation(first, second), 0.01, "consecutive draws")
	require.NoError(t, d.ManualSeed(12))
	other, err := d.RandU(Float32, n).Float32s(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 0, correlation(first, other), 0.01, "another seed")

	for _, dtype := range []DType{Float64, BFloat16} {
		u := d.RandU(dtype, 4096).Cast(Float64)
		lo, err := u.Min().Item(ctx)
		require.NoError(t, err)
		hi, err := u.Max().Item(ctx)
		require.NoError(t, err)
		assert.True(t, lo >= 0 && hi < 1, "%s: values in [%g, %g]", dtype, lo, hi)
		assert.Greater(t, hi, 0.9, "%s: draws reach near 1", dtype)
	}
}
