package nn_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestDenseKeepsItsFailure: nn.Dense with impossible sizes builds a layer
// that carries the error: nn.Err names the layer, Forward's result and
// an optimizer over its parameters fail with it instead of panicking; a
// good nn.Dense equals nn.NewLinear with a bias from the same generator.
func TestDenseKeepsItsFailure(t *testing.T) {
	d := xlatest.NewEngine(t, 1).Device(0)
	good := nn.Dense(d, nn.NewRand(3), 4, 2)
	require.NoError(t, good.Err())
	want, err := nn.NewLinear(d, nn.NewRand(3), 4, 2, true)
	require.NoError(t, err)
	ctx := t.Context()
	for i, p := range nn.Parameters(good) {
		got, err := p.Float32s(ctx)
		require.NoError(t, err)
		ref, err := nn.Parameters(want)[i].Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, ref, got)
	}

	model := nn.NewSequential(nn.Dense(d, nn.NewRand(1), 4, 4), nn.ReLU{}, nn.Dense(d, nn.NewRand(1), 4, -3))
	err = nn.Err(model)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2: nn: Dense(4, -3)")
	assert.NoError(t, nn.Err(nn.NewSequential(good, nn.ReLU{})))

	x, err := xla.FromSlice(d, make([]float32, 8), 2, 4)
	require.NoError(t, err)
	assert.ErrorContains(t, model.Forward(x).Err(), "Dense(4, -3)")
	_, err = optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	assert.ErrorContains(t, err, "a layer failed to build")
}
