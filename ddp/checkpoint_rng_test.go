package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// dropoutSpawn trains a wrapped MLP with dropout on every local replica
// of a spawned job (each replica's device seeded apart, as Spawn seeds
// them) for steps steps, resuming from load when set and saving the
// checkpoint of step saveAt (with every replica's random state) to save;
// it returns replica 0's final parameters.
func dropoutSpawn(t *testing.T, replicas int, load, save string, saveAt, steps int) ([]float32, error) {
	final := make(chan []float32, 1)
	err := ddp.Spawn(t.Context(), func(ctx context.Context, w ddp.Worker) error {
		d := w.Device
		l1, err1 := nn.NewLinear(d, nn.NewRand(7), 10, 16, true)
		l2, err2 := nn.NewLinear(d, nn.NewRand(8), 16, 5, true)
		drop, err3 := nn.NewDropout(0.5)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		model, err := ddp.Wrap(ctx, nn.NewSequential(l1, nn.ReLU{}, drop, l2))
		if err != nil {
			return err
		}
		opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		c := optim.Checkpoint{Model: model, Optimizer: opt, RNG: d}
		if load != "" {
			if err := ddp.LoadCheckpoint(ctx, load, &c); err != nil {
				return err
			}
		}
		xs, ys := make([]float32, 4*10), make([]float32, 4*5)
		for step := c.Step; step < steps; step++ {
			for i := range xs {
				xs[i] = float32((i*7+w.Rank*3+step)%11) / 11
			}
			for i := range ys {
				ys[i] = float32((i*5+w.Rank+step)%7) / 7
			}
			x, _ := xla.FromSlice(d, xs, 4, 10)
			y, _ := xla.FromSlice(d, ys, 4, 5)
			opt.ZeroGrad()
			if err := optim.BackwardStep(ctx, nn.MSELoss(model.Forward(x), y, nn.ReductionMean), opt); err != nil {
				return err
			}
			if step+1 == saveAt {
				if err := ddp.SaveCheckpoint(ctx, save, optim.Checkpoint{Model: model, Optimizer: opt, Step: step + 1, RNG: d}); err != nil {
					return err
				}
			}
		}
		if w.Rank == 0 {
			v, err := nn.Parameters(model)[0].Float32s(ctx)
			if err != nil {
				return err
			}
			final <- v
		}
		return nil
	}, ddp.SpawnOptions{Devices: replicas, Device: backend.Options{Target: backend.CPU}})
	if err != nil {
		return nil, err
	}
	return <-final, nil
}

// rewrite rewrites the checkpoint at path with edit applied to its
// tensors.
func rewrite(t *testing.T, path, to string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	f.Tensors = edit(f.Tensors)
	require.NoError(t, safetensors.WriteFile(to, f))
}

// TestCheckpointRestoresEveryReplicasRNG: two local replicas, seeded
// apart, draw different dropout masks; a checkpoint holds both random
// states, so a resume ends bit-identical to the uninterrupted run. With
// only replica 0's state (the table removed) both replicas would draw
// its masks, and the run would differ: the test sees that. A file of
// another replica count loads (each replica keeps its own seeding); a
// damaged table is refused.
func TestCheckpointRestoresEveryReplicasRNG(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "step3.safetensors")
	uninterrupted, err := dropoutSpawn(t, 2, "", ck, 3, 6)
	require.NoError(t, err)
	f, err := safetensors.ReadFile(ck)
	require.NoError(t, err)
	table, ok := f.Lookup("ddp.replica_rng")
	require.True(t, ok, "the file holds every replica's random state")
	assert.Equal(t, "U64", table.DType)
	assert.Equal(t, 2, table.Shape[0])
	assert.NotEqual(t, table.Data[:len(table.Data)/2], table.Data[len(table.Data)/2:], "the replicas' states differ")

	resumed, err := dropoutSpawn(t, 2, ck, "", 0, 6)
	require.NoError(t, err)
	assert.Equal(t, uninterrupted, resumed, "resumed bit for bit")

	onlyReplica0 := filepath.Join(dir, "only0.safetensors")
	rewrite(t, ck, onlyReplica0, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return slices.DeleteFunc(ts, func(t safetensors.Tensor) bool { return t.Name == "ddp.replica_rng" })
	})
	alike, err := dropoutSpawn(t, 2, onlyReplica0, "", 0, 6)
	require.NoError(t, err)
	assert.NotEqual(t, uninterrupted, alike, "with replica 0's state on both, the masks and the run differ")

	_, err = dropoutSpawn(t, 1, ck, "", 0, 6)
	assert.NoError(t, err, "another replica count resumes, each replica with its own seeding")

	for name, edit := range map[string]func(*safetensors.Tensor){
		"row size":  func(t *safetensors.Tensor) { t.Shape = []int{1, 2 * t.Shape[1]} },
		"dtype":     func(t *safetensors.Tensor) { t.DType = "I64" },
		"dimension": func(t *safetensors.Tensor) { t.Shape = []int{t.Shape[0] * t.Shape[1]} },
	} {
		bad := filepath.Join(dir, "bad-"+name+".safetensors")
		rewrite(t, ck, bad, func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == "ddp.replica_rng" {
					edit(&ts[i])
				}
			}
			return ts
		})
		_, err := dropoutSpawn(t, 2, bad, "", 0, 6)
		assert.ErrorContains(t, err, "ddp.replica_rng is ", fmt.Sprintf("a table with another %s is refused", name))
	}
}
