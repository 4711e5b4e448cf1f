package zero_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// TestZeroCheckpointRestoresEveryReplicasRNG: each shard holds its
// replica's random state, so two local replicas seeded apart, training
// with dropout under the sharded optimizer, resume bit for bit; the
// consolidated file carries the states as checkpoint.Save writes them,
// and resumes plain DDP to the same bits. Without the states (a load
// without RNG) the run differs: the test sees it.
func TestZeroCheckpointRestoresEveryReplicasRNG(t *testing.T) {
	sgd := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
		return optim.NewSGD(groups[0].Params, optim.SGDConfig{LR: 0.1})
	}
	sharded := func(ctx context.Context, m *ddp.DistributedDataParallel) (optim.Optimizer, error) {
		return zero.New(ctx, m, nil, sgd)
	}
	dir := filepath.Join(t.TempDir(), "ck")
	run := func(load string, saveAt int, loadCheckpoint func(context.Context, string, *optim.Checkpoint) error) []float32 {
		v, err := ddptest.DropoutSpawn(t, ddptest.DropoutRun{Replicas: 2, Load: load, Save: dir, SaveAt: saveAt, Steps: 6,
			Optimizer: sharded, LoadWith: loadCheckpoint})
		require.NoError(t, err)
		return v
	}
	uninterrupted := run("", 3, nil)
	assert.Equal(t, uninterrupted, run(dir, 0, checkpoint.Load), "resumed bit for bit")
	withoutRNG := func(ctx context.Context, dir string, c *optim.Checkpoint) error {
		c.RNG = nil
		return checkpoint.Load(ctx, dir, c)
	}
	assert.NotEqual(t, uninterrupted, run(dir, 0, withoutRNG), "without the saved states the masks differ")

	file := filepath.Join(t.TempDir(), "whole.safetensors")
	require.NoError(t, zero.ConsolidateCheckpoint(dir, file))
	f, err := safetensors.ReadFile(file)
	require.NoError(t, err)
	table, ok := f.Lookup(checkpoint.ReplicaRNGName)
	require.True(t, ok)
	assert.Equal(t, 2, table.Shape[0])
	_, ok = f.Lookup("optimizer.rng.device")
	assert.False(t, ok, "the random state is not optimizer state")
	plain, err := ddptest.DropoutSpawn(t, ddptest.DropoutRun{Replicas: 2, Load: file, Steps: 6})
	require.NoError(t, err)
	assert.Equal(t, uninterrupted, plain, "plain DDP resumes the consolidated file to the same bits")
}

// TestZeroUnderTheCheckpointer: checkpoint.Checkpointer with ddp/zero's
// sharded optimizer. SIGTERM after step 3 stops every
// replica with ErrPreempted after committing step 3's sharded checkpoint
// (a directory, no partial one left), the next run restores it and ends
// bit-identical to an uninterrupted run, dropout included; Keep holds.
func TestZeroUnderTheCheckpointer(t *testing.T) {
	sharded := func(ctx context.Context, m *ddp.DistributedDataParallel) (optim.Optimizer, error) {
		return zero.New(ctx, m, nil, func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewSGD(groups[0].Params, optim.SGDConfig{LR: 0.1, Momentum: 0.9})
		})
	}
	dir := t.TempDir()
	run := func(ckDir string, termAt int) ([]float32, error) {
		return ddptest.DropoutSpawn(t, ddptest.DropoutRun{Replicas: 2, Steps: 8, Optimizer: sharded, TermAt: termAt,
			Checkpointer: &checkpoint.Options{Dir: ckDir, Every: 2, Keep: 2}})
	}
	uninterrupted, err := run(t.TempDir(), 0)
	require.NoError(t, err)
	_, err = run(dir, 3)
	require.ErrorIs(t, err, checkpoint.ErrPreempted)
	names, err := stepEntries(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "step-000000000002"), filepath.Join(dir, "step-000000000003")}, names,
		"the periodic checkpoint and the preemption's, committed, nothing partial")
	resumed, err := run(dir, 0)
	require.NoError(t, err)
	assert.Equal(t, uninterrupted, resumed, "resumed bit for bit")
	names, err = stepEntries(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "step-000000000006"), filepath.Join(dir, "step-000000000008")}, names, "Keep: 2")
}

// stepEntries is what dir holds but the owner file that names its job.
func stepEntries(dir string) ([]string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	return slices.DeleteFunc(names, func(n string) bool { return filepath.Base(n) == checkpoint.OwnerFile }), err
}
