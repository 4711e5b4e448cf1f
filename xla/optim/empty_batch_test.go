package optim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestEmptyBatchTrainingStep: a batch of 0 examples (a real last batch)
// goes through a conv net, the loss, Backward and an SGD step as in torch:
// the mean loss is NaN, every gradient is zero, so SGD without weight decay
// leaves every parameter unchanged.
func TestEmptyBatchTrainingStep(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	d := e.Device(0)
	ctx := xlatest.Context(t)
	rng := nn.NewRand(1)
	conv, err := nn.NewConv2d(d, rng, nn.Conv2dConfig{In: 1, Out: 4, Kernel: 3, Padding: 1, Bias: true})
	require.NoError(t, err)
	fc, err := nn.NewLinear(d, rng, 4*4*4, 3, true)
	require.NoError(t, err)
	pool, err := nn.NewMaxPool2d(2, 2, 0)
	require.NoError(t, err)
	model := nn.NewSequential(conv, nn.ReLU{}, pool, nn.Flatten{}, fc)
	params := nn.Parameters(model)
	before := make([][]float32, len(params))
	for i, p := range params {
		before[i], err = p.Float32s(ctx)
		require.NoError(t, err)
	}
	opt, err := NewSGD(params, SGDConfig{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)

	x, err := xla.FromSlice(d, []float32{}, 0, 1, 8, 8)
	require.NoError(t, err)
	labels, err := xla.FromSlice(d, []int32{}, 0)
	require.NoError(t, err)
	loss := nn.CrossEntropyLoss(model.Forward(x), labels, nn.ReductionMean)
	require.NoError(t, loss.Backward())
	require.NoError(t, opt.Step())
	v, err := loss.Item(ctx)
	require.NoError(t, err)
	assert.True(t, math.IsNaN(v), "the mean over no examples is NaN, as in torch")
	for i, p := range params {
		g, err := p.Grad().Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, make([]float32, len(g)), g, "param %d: zero gradient from no examples", i)
		after, err := p.Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, before[i], after, "param %d unchanged", i)
	}
}
