package xla

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookModel is loss = sum(w·x) + 0·unused-free: w gets the gradient x, b
// gets 1 per element, and c (RequiresGrad, not in the loss) gets none.
func hookModel(t *testing.T, d *Device) (w, b, c *Tensor, loss func() *Tensor) {
	w = mustFromSlice(t, d, []float32{1, 2, 3}, 3)
	b = mustFromSlice(t, d, []float32{0.5, 0.5, 0.5}, 3)
	c = mustFromSlice(t, d, []float32{9}, 1)
	for _, p := range []*Tensor{w, b, c} {
		require.NoError(t, p.SetRequiresGrad(true))
	}
	x := mustFromSlice(t, d, []float32{4, 5, 6}, 3)
	return w, b, c, func() *Tensor { return w.Mul(x).Add(b).Sum() }
}

// TestBackwardHooks: a hook sees the leaves this Backward gave a gradient
// (not the ones outside the loss), in marking order; what it sets is the
// gradient from then on; hooks run in registration order; removing one
// stops it, twice is harmless, and a hook may remove itself.
func TestBackwardHooks(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, 1)
	d := e.Device(0)
	w, b, c, loss := hookModel(t, d)
	var order []string
	var seen []*Tensor
	removeDouble := d.RegisterBackwardHook(func(leaves []*Tensor) error {
		order = append(order, "double")
		seen = leaves
		for _, l := range leaves {
			if err := l.SetGrad(l.Grad().MulScalar(2)); err != nil {
				return err
			}
		}
		return nil
	})
	var removeOnce func()
	removeOnce = d.RegisterBackwardHook(func([]*Tensor) error {
		order = append(order, "once")
		removeOnce()
		return nil
	})
	require.NoError(t, loss().Backward())
	assert.Equal(t, []string{"double", "once"}, order)
	assert.Equal(t, []*Tensor{w, b}, seen, "c is outside the loss")
	assert.Nil(t, c.Grad())
	gw, err := w.Grad().Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{8, 10, 12}, gw)

	// Accumulation: the second Backward adds x to the doubled gradient, and
	// the hook doubles the sum; "once" is gone.
	require.NoError(t, loss().Backward())
	assert.Equal(t, []string{"double", "once", "double"}, order)
	gw, err = w.Grad().Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{24, 30, 36}, gw)
	gb, err := b.Grad().Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{6, 6, 6}, gb)

	removeDouble()
	removeDouble()
	removeOnce()
	w.ZeroGrad()
	require.NoError(t, loss().Backward())
	gw, err = w.Grad().Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{4, 5, 6}, gw)
	assert.Len(t, order, 3)
}

// TestBackwardHookErrors: a hook's error is Backward's, naming the hook;
// the later hooks do not run; a Backward that fails before the gradients
// runs no hook.
func TestBackwardHookErrors(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	_, _, _, loss := hookModel(t, d)
	boom := errors.New("boom")
	calls := 0
	d.RegisterBackwardHook(func([]*Tensor) error { calls++; return boom })
	d.RegisterBackwardHook(func([]*Tensor) error { calls += 100; return nil })
	err := loss().Backward()
	assert.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "backward hook 0")
	assert.Equal(t, 1, calls)

	noPath := mustFromSlice(t, d, []float32{1, 2}, 2).Sum()
	assert.Error(t, noPath.Backward())
	assert.Equal(t, 1, calls, "a failed Backward ran the hooks")
}

// TestBackwardHookInACompiledStep: the gradient a hook sets during the
// trace is what the compiled program uses on every replay.
func TestBackwardHookInACompiledStep(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, 1)
	d := e.Device(0)
	w, b, _, loss := hookModel(t, d)
	d.RegisterBackwardHook(func(leaves []*Tensor) error {
		for _, l := range leaves {
			if err := l.SetGrad(l.Grad().MulScalar(-1)); err != nil {
				return err
			}
		}
		return nil
	})
	step := Compile(func(...*Tensor) ([]*Tensor, error) {
		w.ZeroGrad()
		b.ZeroGrad()
		if err := loss().Backward(); err != nil {
			return nil, err
		}
		return nil, w.Assign(w.Add(w.Grad().MulScalar(0.5)).Detach())
	})
	traces := GetMetrics().StepTraces
	for range 3 {
		_, err := step.Run(ctx, d)
		require.NoError(t, err)
	}
	// w ← w − 0.5·x three times.
	got, err := w.Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{1 - 6, 2 - 7.5, 3 - 9}, got)
	assert.EqualValues(t, 1, GetMetrics().StepTraces-traces)
}
