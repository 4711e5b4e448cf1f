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

// TestMarkStepReturnsBeforeTheStepRuns: with an asynchronous client
// MarkStep hands the compiled program to the device and returns, and
// reading the value waits for it; with a synchronous one (the CPU default)
// MarkStep returns when the program ran. Both give the same bits.
func TestMarkStepReturnsBeforeTheStepRuns(t *testing.T) {
	var want []float32
	for _, mode := range []backend.CPUExecution{backend.CPUAsync, backend.CPUSync} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEngineExecuting(t, 1, mode)
			d := e.Device(0)
			ctx := testContext(t)
			x := heavyInput(t, d)
			const chain = 40
			// Compile first: only the second step is timed.
			y := heavyStep(x, chain)
			require.NoError(t, d.MarkStep(ctx))
			_, err := y.Float32s(ctx)
			require.NoError(t, err)

			y = heavyStep(x, chain)
			start := time.Now()
			require.NoError(t, d.MarkStep(ctx))
			dispatch := time.Since(start)
			got, err := y.Float32s(ctx)
			require.NoError(t, err)
			total := time.Since(start)
			t.Logf("%s: MarkStep returned after %v; the value was read after %v", mode, dispatch, total)
			if mode == backend.CPUAsync {
				assert.Less(t, dispatch, total/3, "MarkStep waited for the execution")
			} else {
				assert.Greater(t, dispatch, total/2, "MarkStep returned before a synchronous execution ran")
			}
			again := heavyStep(x, chain)
			gotAgain, err := again.Float32s(ctx) // forces its own MarkStep, then waits
			require.NoError(t, err)
			assert.Equal(t, got, gotAgain)
			if want == nil {
				want = got
			}
			assert.Equal(t, want, got, "the two execution modes disagree")
		})
	}
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

// TestEarlierValueReadsWhileTheNextStepRuns: a value an earlier step
// computed (the loss a training loop logs one step late) is read while the
// step after it still runs, without waiting for that step; reading the
// running step's own value waits for it.
func TestEarlierValueReadsWhileTheNextStepRuns(t *testing.T) {
	e := newEngineExecuting(t, 1, backend.CPUAsync)
	d := e.Device(0)
	ctx := testContext(t)
	x := heavyInput(t, d)
	for range 2 { // the first round compiles
		earlier := x.Sum()
		require.NoError(t, d.MarkStep(ctx))
		y := heavyStep(x, 40)
		require.NoError(t, d.MarkStep(ctx))
		start := time.Now()
		v, err := earlier.Item(ctx)
		require.NoError(t, err)
		readEarlier := time.Since(start)
		_, err = y.Float32s(ctx)
		require.NoError(t, err)
		total := time.Since(start)
		assert.InDelta(t, 0, v, 512*512)
		t.Logf("the earlier value was read after %v, the running step's after %v", readEarlier, total)
		assert.Less(t, readEarlier, total/3, "reading an earlier step's value waited for the running step")
	}
}
