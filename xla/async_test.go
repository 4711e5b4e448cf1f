package xla

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
)

// heavyStep records a chain of n 512x512 matmuls (about n·0.27 GFLOP), each
// scaled back to unit size so values stay finite.
func heavyStep(x *Tensor, n int) *Tensor {
	for range n {
		x = x.MatMul(x).MulScalar(1.0 / 512)
	}
	return x
}

func heavyInput(t *testing.T, d *Device) *Tensor {
	v := make([]float32, 512*512)
	for i := range v {
		v[i] = float32(math.Sin(float64(i)))
	}
	return mustFromSlice(t, d, v, 512, 512)
}

// TestMarkStepReturnsBeforeTheStepRuns: MarkStep hands the compiled program
// to the device and returns; reading the value waits for it. With the
// program compiled, MarkStep takes a small part of the execution.
func TestMarkStepReturnsBeforeTheStepRuns(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	x := heavyInput(t, d)
	const chain = 40
	// Compile, and measure a synchronous step: MarkStep plus the read.
	y := heavyStep(x, chain)
	require.NoError(t, d.MarkStep(ctx))
	_, err := y.Float32s(ctx)
	require.NoError(t, err)

	y = heavyStep(x, chain)
	start := time.Now()
	require.NoError(t, d.MarkStep(ctx))
	dispatch := time.Since(start)
	want, err := y.Float32s(ctx)
	require.NoError(t, err)
	total := time.Since(start)
	t.Logf("MarkStep returned after %v; the value was read after %v", dispatch, total)
	assert.Less(t, dispatch, total/3, "MarkStep waited for the execution")

	// The asynchronous result is the synchronous one, bit for bit.
	again := heavyStep(x, chain)
	got, err := again.Float32s(ctx) // forces its own MarkStep, then waits
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestCloseWaitsForARunningStep: Close right after a MarkStep waits for the
// execution in flight, frees everything, and later reads fail with
// backend.ErrClosed instead of reading freed memory.
func TestCloseWaitsForARunningStep(t *testing.T) {
	for range 5 {
		e := newEngine(t, 1)
		d := e.Device(0)
		ctx := testContext(t)
		y := heavyStep(heavyInput(t, d), 10)
		require.NoError(t, d.MarkStep(ctx))
		require.NoError(t, e.Close())
		_, err := y.Float32s(ctx)
		assert.True(t, errors.Is(err, backend.ErrClosed), "read after Close: %v", err)
	}
}

// TestStepsChainWithoutWaiting: several MarkSteps in a row, each reading
// the last one's outputs, run in order; only the final read waits.
func TestStepsChainWithoutWaiting(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	w := mustFromSlice(t, d, []float32{1, 2, 3}, 3)
	for range 50 {
		require.NoError(t, w.Assign(w.MulScalar(2).AddScalar(-1))) // w ← 2w − 1
		require.NoError(t, d.MarkStep(ctx))
	}
	got, err := w.Float32s(ctx)
	require.NoError(t, err)
	// w − 1 doubles every step: w_k = 1 + (w_0 − 1)·2^k.
	want := []float32{1, float32(1 + math.Pow(2, 50)), float32(1 + 2*math.Pow(2, 50))}
	assert.Equal(t, want, got)
}
