package xla

import (
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepeatedStepNeedsNoCollection: MarkStep forces a GC only the first
// time it sees a recording; the same step again reuses what it learned,
// whatever the user's heap holds.
func TestRepeatedStepNeedsNoCollection(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	params, x, y, err := toyReplica(d, toyInit(3), 0)
	require.NoError(t, err)
	ResetMetrics()
	for range 20 {
		_, err := toyStep(params, x, y)
		require.NoError(t, err)
		require.NoError(t, d.MarkStep(ctx))
	}
	m := GetMetrics()
	assert.EqualValues(t, 1, m.Collections, "one GC, at the first MarkStep of the loop")
	assert.EqualValues(t, 1, m.Compilations)
	assert.EqualValues(t, 20, m.Executions)
}

// TestHandleLeftOutIsComputedOnDemand: the first time a step is seen, an
// intermediate is dropped, so the program does not output it. When a later
// run of the identical step keeps and reads it, its value is computed from
// its recipe, from the buffers it was recorded on: the same value the
// step computed, not one from the updated parameters.
func TestHandleLeftOutIsComputedOnDemand(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	w := mustFromSlice(t, d, []float32{1, 2, 3}, 3)
	var kept *Tensor
	var wantKept []float32
	for i := range 5 {
		host, err := w.Float32s(ctx)
		require.NoError(t, err)
		mid := w.MulScalar(2).AddScalar(1) // 2w+1
		require.NoError(t, w.Assign(mid.MulScalar(0.5)))
		if i == 3 {
			kept = mid
			wantKept = []float32{2*host[0] + 1, 2*host[1] + 1, 2*host[2] + 1}
		}
		runtime.GC() // what a collection would see does not matter any more
		require.NoError(t, d.MarkStep(ctx))
	}
	require.True(t, kept.IsPending(), "the step was first seen with mid dropped, so it is not an output")
	got, err := kept.Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, wantKept, got)
	assert.False(t, kept.IsPending())
	final, err := w.Float32s(ctx)
	require.NoError(t, err)
	want := []float32{1, 2, 3}
	for range 5 {
		for j := range want {
			want[j] += 0.5
		}
	}
	assert.Equal(t, want, final)
}

// TestSharedNodeSettlesEveryHandle: two handles of one value, one assigned
// from the other; MarkStep settles the one it tracks, and the other reads
// the same buffer without another program.
func TestSharedNodeSettlesEveryHandle(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	a := mustFromSlice(t, d, []float32{1, 2}, 2)
	b := mustFromSlice(t, d, []float32{0, 0}, 2)
	sum := a.AddScalar(3)
	require.NoError(t, b.Assign(sum))
	require.NoError(t, d.MarkStep(ctx))
	ResetMetrics()
	for _, h := range []*Tensor{sum, b} {
		got, err := h.Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, []float32{4, 5}, got)
	}
	assert.Zero(t, GetMetrics().Executions, "both handles read the step's output")
}

// TestRepeatedStepWithAnErrorIsAlwaysCollected: a step that records an
// error tensor is never answered from the remembered liveness: dropped, the
// error does not fail the step however often it repeats; kept, it fails
// the step each time.
func TestRepeatedStepWithAnErrorIsAlwaysCollected(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	w := mustFromSlice(t, d, []float32{1, 2}, 2)
	var kept *Tensor
	for i := range 6 {
		kept = recordStepWithError(t, w, i >= 3)
		err := d.MarkStep(ctx)
		if i >= 3 {
			assert.Error(t, err, "step %d: a held error tensor fails the step", i)
		} else {
			assert.NoError(t, err, "step %d: a dropped error tensor does not", i)
		}
	}
	runtime.KeepAlive(kept)
}

// recordStepWithError records w ← w+1 and an error tensor, returned only if
// keep. Not inlined, so the caller's frame never holds the dropped tensor
// (the test is about the engine, not about Go's stack liveness).
//
//go:noinline
func recordStepWithError(t *testing.T, w *Tensor, keep bool) *Tensor {
	bad := w.Reshape(3) // an error: 2 elements into 3
	require.Error(t, bad.Err())
	require.NoError(t, w.Assign(w.AddScalar(1)))
	if keep {
		return bad
	}
	return nil
}

// TestStepWithNoInputs: a program made only of constants (no buffer to
// read) runs and reads back.
func TestStepWithNoInputs(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	got, err := d.Ones(Float32, 3).AddScalar(1).Float32s(testContext(t))
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 2, 2}, got)
}

// TestHyperparameterHostileValues: NaN and infinities are inputs like any
// value; an unsupported dtype is an error carried by the tensor.
func TestHyperparameterHostileValues(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	x := mustFromSlice(t, d, []float32{1, -1}, 2)
	for _, v := range []float64{math.NaN(), math.Inf(1), 0, 1, -0.5} {
		got, err := x.Mul(d.Hyperparameter(v, Float32)).Float32s(ctx)
		require.NoError(t, err)
		for i, xi := range []float64{1, -1} {
			want := float32(xi * v)
			if math.IsNaN(float64(want)) {
				assert.True(t, math.IsNaN(float64(got[i])))
			} else {
				assert.Equal(t, want, got[i], "%g·%g", xi, v)
			}
		}
	}
	assert.Error(t, d.Hyperparameter(1, DType(9999)).Err())
}
