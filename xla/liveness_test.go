package xla

import (
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
