package ddp_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestRunHandsOverTheCheckpointDir: Run gives every replica its
// --checkpoint-dir and --checkpoint-every; a program that never opens a
// checkpointer there fails when it returns, instead of keeping nothing
// without a word; one that keeps its steps there succeeds.
func TestRunHandsOverTheCheckpointDir(t *testing.T) {
	ctx := xlatest.Context(t)
	o := ddp.Options{Spawn: true, CPUDevices: 2, Checkpoints: checkpoint.Options{Dir: t.TempDir(), Every: 7}}
	err := ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error {
		assert.Equal(t, o.Checkpoints, w.Checkpoints)
		return nil
	}, o)
	assert.ErrorContains(t, err, "this program opened no checkpointer there, so nothing was kept")
	assert.ErrorContains(t, err, "checkpoint.Steps(ctx, w.Checkpoints, …)")

	err = ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error {
		model, err := ddptest.NewModel(w.Device, "toy", 1, nil)
		if err != nil {
			return err
		}
		opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		steps, finish := checkpoint.Steps(ctx, w.Checkpoints, 3, optim.Checkpoint{Model: model, Optimizer: opt, RNG: w.Device})
		for range steps {
			opt.ZeroGrad()
			if err := optim.BackwardStep(ctx, nn.Parameters(model)[0].Square().Sum(), opt); err != nil {
				return err
			}
		}
		return finish()
	}, o)
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(o.Checkpoints.Dir, "step-000000000003.safetensors"))
}
