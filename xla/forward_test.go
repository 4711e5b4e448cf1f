package xla

import (
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestForwardOnlyOps checks the ops without gradients exactly against
// values computed by hand.
func TestForwardOnlyOps(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	a := mustFromSlice(t, d, []float32{1, -2, 3, 0.5, 7, -1}, 2, 3)
	b := mustFromSlice(t, d, []float32{1, 2, -3, 0.5, 6, 0}, 2, 3)
	boolOf := func(x *Tensor) []bool {
		v, err := Values[bool](ctx, x)
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, []bool{true, false, false, true, false, false}, boolOf(a.Equal(b)))
	assert.Equal(t, []bool{false, true, true, false, true, true}, boolOf(a.NotEqual(b)))
	assert.Equal(t, []bool{false, true, false, false, false, true}, boolOf(a.Less(b)))
	assert.Equal(t, []bool{true, true, false, true, false, true}, boolOf(a.LessEqual(b)))
	assert.Equal(t, []bool{false, false, true, false, true, false}, boolOf(a.Greater(b)))
	assert.Equal(t, []bool{true, false, true, true, true, false}, boolOf(a.GreaterEqual(b)))

	argmax, err := Values[int32](ctx, a.ArgMax(1))
	require.NoError(t, err)
	assert.Equal(t, []int32{2, 1}, argmax)
	// An axis with no elements has no largest one: an error, not index 0.
	_, err = Values[int32](ctx, d.Zeros(Float32, 3, 0).ArgMax(1))
	assert.ErrorContains(t, err, "axis 1 of (Float32)[3, 0] has no elements")
	empty, err := Values[int32](ctx, d.Zeros(Float32, 0, 4).ArgMax(1))
	require.NoError(t, err, "an empty batch over a non-empty axis is fine")
	assert.Empty(t, empty)
	ints, err := Values[int32](ctx, a.Cast(Int32))
	require.NoError(t, err)
	assert.Equal(t, []int32{1, -2, 3, 0, 7, -1}, ints, "float to int truncates toward zero")
	bf, err := Values[bfloat16.BFloat16](ctx, a.Cast(BFloat16))
	require.NoError(t, err)
	for i, want := range []float32{1, -2, 3, 0.5, 7, -1} {
		assert.Equal(t, want, bf[i].Float32(), "bfloat16 holds small integers and halves exactly")
	}
	iota, err := Values[int32](ctx, d.Arange(5, Int32))
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 1, 2, 3, 4}, iota)
	full, err := d.Full(2.5, Float32, 2, 2).Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{2.5, 2.5, 2.5, 2.5}, full)
}

// TestDeviceRNG: the same seed gives the same numbers in a fresh engine;
// samples have the right moments (10,000 draws: mean within 0.05, standard
// deviation within 0.05 of N(0,1); uniform within [0,1) with mean 0.5±0.02).
func TestDeviceRNG(t *testing.T) {
	draw := func(seed int64) ([]float32, []float32) {
		d := newEngine(t, 1).Device(0)
		require.NoError(t, d.ManualSeed(seed))
		n, err := d.RandN(Float32, 100, 100).Float32s(testContext(t))
		require.NoError(t, err)
		u, err := d.RandU(Float32, 100, 100).Float32s(testContext(t))
		require.NoError(t, err)
		return n, u
	}
	n1, u1 := draw(5)
	n2, u2 := draw(5)
	n3, _ := draw(6)
	assert.Equal(t, n1, n2, "same seed, same normals")
	assert.Equal(t, u1, u2, "same seed, same uniforms")
	assert.NotEqual(t, n1, n3, "another seed, other numbers")
	var sum, sumSq, usum float64
	for i := range n1 {
		sum += float64(n1[i])
		sumSq += float64(n1[i]) * float64(n1[i])
		usum += float64(u1[i])
		assert.True(t, u1[i] >= 0 && u1[i] < 1)
	}
	mean := sum / float64(len(n1))
	assert.InDelta(t, 0, mean, 0.05)
	assert.InDelta(t, 1, math.Sqrt(sumSq/float64(len(n1))-mean*mean), 0.05)
	assert.InDelta(t, 0.5, usum/float64(len(u1)), 0.02)
}
