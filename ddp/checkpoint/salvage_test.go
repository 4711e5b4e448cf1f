package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// trained is a toy model with its SGD after steps steps on device d.
func trained(t *testing.T, ctx context.Context, d *xla.Device, steps int) optim.Checkpoint {
	t.Helper()
	model, err := ddptest.NewModel(d, "toy", 3, nil)
	require.NoError(t, err)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)
	for range steps {
		opt.ZeroGrad()
		loss, err := ddptest.LossOn(d, model, "toy", 0, 4)
		require.NoError(t, err)
		require.NoError(t, optim.BackwardStep(ctx, loss, opt))
	}
	return optim.Checkpoint{Model: model, Optimizer: opt, RNG: d, Step: steps}
}

// TestSalvageCommitsTheStepItHolds: a survivor's commit writes the step
// it holds with no other rank (the state, a pending update included, is
// the one restored); a survivor a step behind writes nothing and names
// the later step; the same step twice is one file; a periodic write
// under way is waited for first.
func TestSalvageCommitsTheStepItHolds(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	dir := t.TempDir()
	ck, err := checkpoint.New(checkpoint.Options{Dir: dir, Every: 2})
	require.NoError(t, err)
	defer ck.Close()

	c := trained(t, ctx, d, 3)
	checkpoint.SlowBackgroundWrites(t, 300*time.Millisecond)
	c.Step = 2
	require.NoError(t, ck.Step(ctx, c), "a periodic checkpoint of step 2, written off the step")
	c.Step = 3
	// A pending update: traced, not run. The commit runs it.
	opt := c.Optimizer
	opt.ZeroGrad()
	loss, err := ddptest.LossOn(d, c.Model, "toy", 0, 4)
	require.NoError(t, err)
	require.NoError(t, loss.Backward())
	require.NoError(t, opt.Step())
	path, err := ck.Salvage(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "step-000000000003.safetensors"), path)
	assert.FileExists(t, filepath.Join(dir, "step-000000000002.safetensors"), "the periodic write landed before the commit")
	want := paramsOf(t, ctx, c.Model)

	behind := c
	behind.Step = 2
	got, err := ck.Salvage(ctx, behind)
	require.NoError(t, err)
	assert.Equal(t, path, got, "a survivor behind names the later step, and writes nothing")
	info, err := os.Stat(path)
	require.NoError(t, err)
	again, err := ck.Salvage(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, path, again)
	info2, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, info.ModTime(), info2.ModTime(), "the same step is not written twice")

	fresh := trained(t, ctx, xlatest.NewEngine(t, 1).Device(0), 0)
	require.NoError(t, checkpoint.Load(ctx, path, &fresh))
	assert.Equal(t, 3, fresh.Step)
	assert.Equal(t, want, paramsOf(t, ctx, fresh.Model), "the committed state is the one the survivor held, its pending update run")
}

// TestSalvageRacesHarmlessly: two survivors (processes here stood in for
// by two engines) commit the same step into one directory at once: one
// whole file, the state they both hold, and no temporary left.
func TestSalvageRacesHarmlessly(t *testing.T) {
	ctx := xlatest.Context(t)
	dir := t.TempDir()
	var states [2]optim.Checkpoint
	var cks [2]*checkpoint.Checkpointer
	for i := range states {
		states[i] = trained(t, ctx, xlatest.NewEngine(t, 1).Device(0), 4)
		var err error
		cks[i], err = checkpoint.New(checkpoint.Options{Dir: dir})
		require.NoError(t, err)
		defer cks[i].Close()
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range states {
		wg.Go(func() { _, errs[i] = cks[i].Salvage(ctx, states[i]) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	names, err := filepath.Glob(filepath.Join(dir, "*step*"))
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "step-000000000004.safetensors")}, names)
	fresh := trained(t, ctx, xlatest.NewEngine(t, 1).Device(0), 0)
	require.NoError(t, checkpoint.Load(ctx, names[0], &fresh))
	assert.Equal(t, paramsOf(t, ctx, states[0].Model), paramsOf(t, ctx, fresh.Model))
}

// TestSalvageRefusesShardedState: with the optimizer sharded over the
// replicas (ZeRO) a lost rank's shard is gone: the commit says so and
// writes nothing, and the job resumes from its periodic checkpoint.
func TestSalvageRefusesShardedState(t *testing.T) {
	ctx := xlatest.Context(t)
	e := xlatest.NewEngine(t, 2)
	dir := t.TempDir()
	err := e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		model, err := ddptest.NewModel(r.Device(), "toy", 3, nil)
		if err != nil {
			return err
		}
		wrapped, err := ddp.Wrap(ctx, model)
		if err != nil {
			return err
		}
		opt, err := zero.New(ctx, wrapped, nil, func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewSGD(groups[0].Params, optim.SGDConfig{LR: 0.1})
		})
		if err != nil {
			return err
		}
		ck, err := checkpoint.New(checkpoint.Options{Dir: dir})
		if err != nil {
			return err
		}
		defer ck.Close()
		_, err = ck.Salvage(ctx, optim.Checkpoint{Model: wrapped, Optimizer: opt, Step: 1})
		return err
	})
	require.ErrorIs(t, err, checkpoint.ErrShardsLost)
	assert.ErrorContains(t, err, "last periodic checkpoint")
	names, _ := filepath.Glob(filepath.Join(dir, "step-*"))
	assert.Empty(t, names)
}

// paramsOf is m's parameters' values.
func paramsOf(t *testing.T, ctx context.Context, m nn.Module) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, p := range nn.Parameters(m) {
		v, err := p.Float32s(ctx)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// withRNGs is a model that kept every replica's random state with its
// last combined step, as ddp's wrapper does on the host path.
type withRNGs struct {
	nn.Module
	states [][]byte
}

func (m withRNGs) CombinedRNGStates() [][]byte { return m.states }

// TestSalvageKeepsEveryReplicasRandomState: the random states the model
// kept with the step (the lost replica's among them) are what the commit
// holds, so that a resume at the same replica count gives each replica
// its own back; a model that kept none (or the wrong count) leaves one
// row, which a resume at several replicas does not take.
func TestSalvageKeepsEveryReplicasRandomState(t *testing.T) {
	ctx := xlatest.Context(t)
	e := xlatest.NewEngine(t, 2)
	var states [][]byte
	for seed := range 2 {
		d := xlatest.NewEngine(t, 1).Device(0)
		require.NoError(t, d.ManualSeed(int64(100+seed)))
		b, err := d.RNGState().Bytes(ctx)
		require.NoError(t, err)
		states = append(states, b)
	}
	job := func(dir string, kept [][]byte) [][]byte {
		got := make([][]byte, 2)
		err := e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
			c := trained(t, ctx, r.Device(), 2)
			ck, err := checkpoint.New(checkpoint.Options{Dir: dir})
			if err != nil {
				return err
			}
			defer ck.Close()
			c.Model = withRNGs{Module: c.Model, states: kept}
			if _, err := ck.Salvage(ctx, c); err != nil {
				return err
			}
			if err := r.Device().ManualSeed(7); err != nil { // drawn away from the saved state
				return err
			}
			if err := checkpoint.Load(ctx, filepath.Join(dir, "step-000000000002.safetensors"), &c); err != nil {
				return err
			}
			index, _ := r.Device().Replica()
			got[index], err = r.Device().RNGState().Bytes(ctx)
			return err
		})
		require.NoError(t, err)
		return got
	}
	assert.Equal(t, states, job(t.TempDir(), states), "each replica resumed with its own random state")
	assert.NotEqual(t, states, job(t.TempDir(), states[:1]), "one row: each replica keeps its own seeding")
}
