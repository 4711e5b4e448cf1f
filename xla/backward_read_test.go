package xla

import (
	"math"
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readModel is loss = Σ tanh(x·W)⊙c with x [2,3], W [3,2], whose gradient
// is xᵀ(c⊙(1−tanh²(x·W))).
var (
	readX = []float32{0.5, -1, 2, 1.5, 0.25, -0.75}
	readW = []float32{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}
	readC = []float32{1, -2, 0.5, 3}
)

// readModelGradient is the float64 reference gradient of readModel.
func readModelGradient() []float64 {
	var y [2][2]float64
	for i := range 2 {
		for j := range 2 {
			for k := range 3 {
				y[i][j] += float64(readX[i*3+k]) * float64(readW[k*2+j])
			}
		}
	}
	grad := make([]float64, 6)
	for k := range 3 {
		for j := range 2 {
			for i := range 2 {
				a := math.Tanh(y[i][j])
				grad[k*2+j] += float64(readX[i*3+k]) * float64(readC[i*2+j]) * (1 - a*a)
			}
		}
	}
	return grad
}

// TestBackwardAfterReadingValues: printing a loss, an activation or a
// parameter before Backward is ordinary torch code. The gradient must be
// the same whether or not a value was read first, and the same after it
// is read. It used to come back nil: the read's MarkStep materialized the
// forward pass, and Backward found no path to the parameters.
func TestBackwardAfterReadingValues(t *testing.T) {
	want := readModelGradient()
	cases := []struct {
		name string
		// step traces the model, reading what the case reads, then Backward.
		step func(t *testing.T, d *Device, w *Tensor)
	}{
		{"no read", func(t *testing.T, d *Device, w *Tensor) {
			loss, _ := forwardReadModel(t, d, w)
			require.NoError(t, loss.Backward())
		}},
		{"loss read before Backward", func(t *testing.T, d *Device, w *Tensor) {
			loss, _ := forwardReadModel(t, d, w)
			_, err := loss.Item(testContext(t))
			require.NoError(t, err)
			require.NoError(t, loss.Backward())
		}},
		{"activation read before the loss is traced", func(t *testing.T, d *Device, w *Tensor) {
			x := mustFromSlice(t, d, readX, 2, 3)
			act := x.MatMul(w).Tanh()
			_, err := act.Float32s(testContext(t))
			require.NoError(t, err)
			c := mustFromSlice(t, d, readC, 2, 2)
			require.NoError(t, act.Mul(c).Sum().Backward())
		}},
		{"activation read after the loss is traced", func(t *testing.T, d *Device, w *Tensor) {
			loss, act := forwardReadModel(t, d, w)
			_, err := act.Float32s(testContext(t))
			require.NoError(t, err)
			require.NoError(t, loss.Backward())
		}},
		{"parameter read while pending", func(t *testing.T, d *Device, w *Tensor) {
			require.NoError(t, w.Assign(w.MulScalar(1))) // w pending, as after an optimizer step
			loss, _ := forwardReadModel(t, d, w)
			_, err := w.Float32s(testContext(t))
			require.NoError(t, err)
			require.NoError(t, loss.Backward())
		}},
		{"loss read twice, then Backward twice (accumulates)", func(t *testing.T, d *Device, w *Tensor) {
			loss, _ := forwardReadModel(t, d, w)
			for range 2 {
				_, err := loss.Item(testContext(t))
				require.NoError(t, err)
			}
			require.NoError(t, loss.Backward())
			require.NoError(t, w.Grad().Err())
			w.ZeroGrad()
			require.NoError(t, loss.Backward())
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, 1)
			d := e.Device(0)
			w := mustFromSlice(t, d, readW, 3, 2)
			require.NoError(t, w.SetRequiresGrad(true))
			c.step(t, d, w)
			require.NotNil(t, w.Grad(), "Backward found the parameter")
			got, err := w.Grad().Float32s(testContext(t))
			require.NoError(t, err)
			assert.InDeltaSlice(t, want, toFloat64(got), 1e-6, "gradient matches the float64 reference")
			again, err := w.Grad().Float32s(testContext(t))
			require.NoError(t, err)
			assert.Equal(t, got, again, "reading after Backward changes nothing")
		})
	}
}

func forwardReadModel(t *testing.T, d *Device, w *Tensor) (loss, act *Tensor) {
	x := mustFromSlice(t, d, readX, 2, 3)
	c := mustFromSlice(t, d, readC, 2, 2)
	act = x.MatMul(w).Tanh()
	return act.Mul(c).Sum(), act
}

// TestBackwardAfterTheGraphIsGone: a Backward two MarkSteps after the loss
// was computed is an error that says why, never a silent missing gradient;
// Detach cuts the gradient like torch's detach.
func TestBackwardAfterTheGraphIsGone(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	w := mustFromSlice(t, d, readW, 3, 2)
	require.NoError(t, w.SetRequiresGrad(true))
	loss, act := forwardReadModel(t, d, w)
	_, err := loss.Item(ctx)
	require.NoError(t, err)
	other := d.Ones(Float32, 2).MulScalar(3)
	_, err = other.Float32s(ctx) // a second step
	require.NoError(t, err)
	assert.ErrorContains(t, loss.Backward(), "was computed at an earlier MarkStep and its graph is gone")
	assert.ErrorContains(t, act.Sum().Backward(), "a value it depends on was computed at an earlier MarkStep")
	assert.Nil(t, w.Grad())

	loss2, _ := forwardReadModel(t, d, w)
	assert.ErrorContains(t, loss2.Detach().Backward(), "does not depend on any RequiresGrad tensor (or was Detached)")
	assert.Nil(t, w.Grad())
}

// TestReadingTheLossEveryStepTrainsTheSame: a training loop that prints
// the loss before Backward takes the same steps as one that does not, and
// still compiles a fixed number of programs.
func TestReadingTheLossEveryStepTrainsTheSame(t *testing.T) {
	train := func(read bool) (losses []float64, compilations int64) {
		e := newEngine(t, 1)
		d := e.Device(0)
		ctx := testContext(t)
		w := mustFromSlice(t, d, readW, 3, 2)
		require.NoError(t, w.SetRequiresGrad(true))
		before := GetMetrics().Compilations
		for range 6 {
			loss, _ := forwardReadModel(t, d, w)
			if read {
				v, err := loss.Item(ctx)
				require.NoError(t, err)
				losses = append(losses, v)
			}
			require.NoError(t, loss.Backward())
			require.NoError(t, w.Assign(w.Detach().Sub(w.Grad().MulScalar(0.1))))
			w.ZeroGrad()
			if !read {
				v, err := loss.Item(ctx)
				require.NoError(t, err)
				losses = append(losses, v)
			}
			require.NoError(t, d.MarkStep(ctx))
		}
		return losses, GetMetrics().Compilations - before
	}
	plain, plainCompiles := train(false)
	withReads, readCompiles := train(true)
	assert.InDeltaSlice(t, plain, withReads, 1e-6)
	assert.Less(t, plain[5], plain[0], "the loss decreases")
	assert.LessOrEqual(t, plainCompiles, int64(2))
	assert.LessOrEqual(t, readCompiles, int64(3), "a fixed set of programs, not one per step")
}

// TestOrdinaryLoopKeepsNoOldBuffers: forward, Backward, update, MarkStep,
// read the loss. The loss's graph was used by Backward, so MarkStep keeps
// no recipe, and the parameter's previous buffer is freed at once, as
// torch frees a graph after backward. A second Backward of that loss is
// an error.
func TestOrdinaryLoopKeepsNoOldBuffers(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	w := mustFromSlice(t, d, readW, 3, 2)
	require.NoError(t, w.SetRequiresGrad(true))
	old := weak.Make(w.data)
	loss, _ := forwardReadModel(t, d, w)
	require.NoError(t, loss.Backward())
	require.NoError(t, w.Assign(w.Detach().Sub(w.Grad().MulScalar(0.1))))
	w.ZeroGrad()
	require.NoError(t, d.MarkStep(ctx))
	_, err := loss.Item(ctx)
	require.NoError(t, err)
	runtime.GC()
	assert.Nil(t, old.Value(), "the pre-update parameter buffer is freed")
	assert.ErrorContains(t, loss.Backward(), "its graph is gone")
	runtime.KeepAlive(loss)
}
