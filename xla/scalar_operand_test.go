package xla

import (
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roundTo is what dtype keeps of the float64 v.
func roundTo(dt DType, v float64) float64 {
	switch dt {
	case Float32:
		return float64(float32(v))
	case BFloat16:
		return float64(bfloat16.FromFloat64(v).Float32())
	}
	return v
}

// TestScalarOperandsNeverTruncate: every dtype × scalar op × {integral,
// negative, fractional, huge, NaN, ±Inf}. Float tensors compute what
// float64 arithmetic rounded to their dtype gives (NaN and the infinities
// included); integer tensors compute integral scalars exactly and refuse
// any scalar they cannot hold (an Int32 [1 2 3 300] times 3.5 used to be
// [3 6 9 900], times 0.1 zeros, plus 1e30 or NaN -2^31), a division by 0
// and a negative power; Bool has no arithmetic.
func TestScalarOperandsNeverTruncate(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	in := []float64{1, 2, 3, 300}
	ops := scalarOps
	scalars := []float64{3, -2, 3.5, 0.1, 1e30, math.NaN(), math.Inf(1), math.Inf(-1)}
	for _, dt := range SupportedDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			x, err := FromSlice(d, []float64{1, 2, 3, 300}, 4)
			require.NoError(t, err)
			x = x.Cast(dt)
			for _, op := range ops {
				for _, v := range scalars {
					y := op.rec(x, v)
					switch {
					case dt == Bool:
						assert.ErrorContains(t, y.Err(), "Bool", "%s(%g) on Bool", op.name, v)
						continue
					case isInteger(dt):
						lo, hi := integerRange(dt)
						fits := v == math.Trunc(v) && v >= lo && v < hi
						if !fits || (op.name == "PowScalar" && v < 0) {
							assert.Error(t, y.Err(), "%s(%g) on %s must be refused", op.name, v, dt)
							if !fits {
								assert.ErrorContains(t, y.Err(), "cannot hold the scalar", "%s(%g) on %s", op.name, v, dt)
							}
							continue
						}
					}
					require.NoError(t, y.Err(), "%s(%g) on %s", op.name, v, dt)
					got := hostValues(t, y)
					for i, xi := range in {
						want := roundTo(dt, op.ref(xi, v, isInteger(dt)))
						if isInteger(dt) && dt == Uint64 && want < 0 {
							want += math.Exp2(64) // unsigned wrap, as torch's uint64
						}
						switch {
						case math.IsNaN(want):
							assert.True(t, math.IsNaN(got[i]), "%s(%g) of %g on %s: got %g, want NaN", op.name, v, xi, dt, got[i])
						case math.IsInf(want, 0):
							assert.Equal(t, want, got[i], "%s(%g) of %g on %s", op.name, v, xi, dt)
						default:
							assert.InDelta(t, want, got[i], tolerance(dt)*math.Max(1, math.Abs(want)), "%s(%g) of %g on %s", op.name, v, xi, dt)
						}
					}
				}
			}
			if isInteger(dt) {
				assert.ErrorContains(t, x.DivScalar(0).Err(), "integer division by zero")
				for _, v := range []float64{math.NaN(), math.Inf(1), 1e30} {
					assert.ErrorContains(t, d.Full(v, dt, 2).Err(), "does not fit", "Full(%g) as %s", v, dt)
				}
			}
		})
	}
}
