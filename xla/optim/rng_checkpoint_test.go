package optim

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// trainDropoutMLP is trainMLP with dropout between its layers: each step
// draws a mask from d's RNG.
func trainDropoutMLP(t *testing.T, d *xla.Device, seed uint64) (nn.Module, Optimizer, func() float64) {
	l1, err := nn.NewLinear(d, nn.NewRand(seed), 4, 16, true)
	require.NoError(t, err)
	l2, err := nn.NewLinear(d, nn.NewRand(seed+1), 16, 3, true)
	require.NoError(t, err)
	drop, err := nn.NewDropout(0.5)
	require.NoError(t, err)
	model := nn.NewSequential(l1, nn.ReLU{}, drop, l2)
	opt, err := NewAdam(nn.Parameters(model), AdamConfig{LR: 0.01})
	require.NoError(t, err)
	x, err := xla.FromSlice(d, []float32{1, 2, 3, 4, -1, 0.5, 2, -2, 0, 1, -3, 1}, 3, 4)
	require.NoError(t, err)
	y, err := xla.FromSlice(d, []int32{0, 2, 1}, 3)
	require.NoError(t, err)
	return model, opt, func() float64 {
		opt.ZeroGrad()
		loss := nn.CrossEntropyLoss(model.Forward(x), y, nn.ReductionMean)
		require.NoError(t, loss.Backward())
		require.NoError(t, opt.Step())
		v, err := loss.Item(context.Background())
		require.NoError(t, err)
		return v
	}
}

// TestCheckpointRestoresTheRNG: with Checkpoint.RNG, training with dropout
// resumed in a "new process" (the device reseeded) repeats the
// uninterrupted losses bit for bit; without it the masks, and the
// losses, differ. A file saved without the state is refused when asked
// for it.
func TestCheckpointRestoresTheRNG(t *testing.T) {
	ctx := context.Background()
	d := newDevice(t)
	require.NoError(t, d.ManualSeed(7))
	_, _, step := trainDropoutMLP(t, d, 1)
	var uninterrupted []float64
	for range 6 {
		uninterrupted = append(uninterrupted, step())
	}

	require.NoError(t, d.ManualSeed(7))
	model, opt, step := trainDropoutMLP(t, d, 1)
	for range 3 {
		step()
	}
	dir := t.TempDir()
	with, without := filepath.Join(dir, "rng.safetensors"), filepath.Join(dir, "plain.safetensors")
	require.NoError(t, SaveCheckpoint(ctx, with, Checkpoint{Model: model, Optimizer: opt, Step: 3, RNG: d}))
	require.NoError(t, SaveCheckpoint(ctx, without, Checkpoint{Model: model, Optimizer: opt, Step: 3}))

	resume := func(path string, rng *xla.Device) []float64 {
		require.NoError(t, d.ManualSeed(12345)) // a new process's device
		fresh, freshOpt, freshStep := trainDropoutMLP(t, d, 99)
		require.NoError(t, LoadCheckpoint(path, &Checkpoint{Model: fresh, Optimizer: freshOpt, RNG: rng}))
		var out []float64
		for range 3 {
			out = append(out, freshStep())
		}
		return out
	}
	assert.Equal(t, uninterrupted[3:], resume(with, d), "the restored RNG draws the uninterrupted masks")
	assert.NotEqual(t, uninterrupted[3:], resume(with, nil), "without the RNG the masks differ")

	fresh, freshOpt, _ := trainDropoutMLP(t, d, 99)
	err := LoadCheckpoint(without, &Checkpoint{Model: fresh, Optimizer: freshOpt, RNG: d})
	assert.ErrorContains(t, err, "holds no random state (saved without Checkpoint.RNG)")
}
