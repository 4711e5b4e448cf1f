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
	return trainMLPWith(t, d, seed, 16, 0.5)
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
	require.NoError(t, WriteCheckpointFile(ctx, with, Checkpoint{Model: model, Optimizer: opt, Step: 3, RNG: d}))
	require.NoError(t, WriteCheckpointFile(ctx, without, Checkpoint{Model: model, Optimizer: opt, Step: 3}))

	resume := func(path string, rng *xla.Device) []float64 {
		require.NoError(t, d.ManualSeed(12345)) // a new process's device
		fresh, freshOpt, freshStep := trainDropoutMLP(t, d, 99)
		require.NoError(t, ReadCheckpointFile(path, &Checkpoint{Model: fresh, Optimizer: freshOpt, RNG: rng}))
		var out []float64
		for range 3 {
			out = append(out, freshStep())
		}
		return out
	}
	assert.Equal(t, uninterrupted[3:], resume(with, d), "the restored RNG draws the uninterrupted masks")
	assert.NotEqual(t, uninterrupted[3:], resume(with, nil), "without the RNG the masks differ")

	fresh, freshOpt, _ := trainDropoutMLP(t, d, 99)
	err := ReadCheckpointFile(without, &Checkpoint{Model: fresh, Optimizer: freshOpt, RNG: d})
	assert.ErrorContains(t, err, "holds no random state (saved without Checkpoint.RNG)")
}
