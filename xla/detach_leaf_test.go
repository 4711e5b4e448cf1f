package xla

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDetachedTensorMadeALeaf: torch's y = (2x).detach();
// y.requires_grad_(); (y·y).sum().backward() gives y.grad = 2y = 4x and x
// no gradient (the detach stops it); the device's backward hook sees y
// among the leaves. Before, y's gradient was all zeros with no error.
// The float64 reference is the derivative by hand.
func TestDetachedTensorMadeALeaf(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, 1)
	d := e.Device(0)
	xs := []float32{1, -2, 3.5}
	x := mustFromSlice(t, d, xs, 3)
	require.NoError(t, x.SetRequiresGrad(true))
	y := x.MulScalar(2).Detach()
	require.NoError(t, y.SetRequiresGrad(true))
	var hooked []*Tensor
	remove := d.RegisterBackwardHook(func(leaves []*Tensor) error { hooked = leaves; return nil })
	defer remove()
	require.NoError(t, y.Mul(y).Sum().Backward())
	require.NotNil(t, y.Grad(), "y has a gradient")
	got, err := Values[float32](ctx, y.Grad())
	require.NoError(t, err)
	for i, v := range xs {
		assert.InDelta(t, 4*float64(v), float64(got[i]), 1e-6, "dy[%d]", i)
	}
	assert.Nil(t, x.Grad(), "the detach stops the gradient before x")
	assert.Contains(t, hooked, y)

	// Made a leaf after its value was read, it is a plain leaf.
	z := x.MulScalar(3).Detach()
	require.NoError(t, d.MarkStep(ctx))
	require.NoError(t, z.SetRequiresGrad(true))
	require.NoError(t, z.Mul(z).Sum().Backward())
	gz, err := Values[float32](ctx, z.Grad())
	require.NoError(t, err)
	assert.InDelta(t, 6*3.5, float64(gz[2]), 1e-5)
}
