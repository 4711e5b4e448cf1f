package training_test

import (
	"context"
	"iter"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestFeedOfEachMode: the plain mode splits the global batch over the
// replicas (saying how it rounded one that does not divide) and refuses a
// share with no whole batch. (The deterministic mode's feed, which needs
// a process whose backends are all deterministic, is run by the examples'
// and the guide program's tests.)
func TestFeedOfEachMode(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	for _, tc := range []struct {
		name                      string
		n, replicas, global       int
		batch, slots, steps, want int
		note, err                 string
	}{
		{name: "divides", n: 600, replicas: 3, global: 60, batch: 20, slots: 1, steps: 10, want: 60},
		{name: "rounded down", n: 600, replicas: 3, global: 64, batch: 21, slots: 1, steps: 9, want: 63,
			note: "the global batch 64 does not divide over 3 replicas: each takes 21, a global batch of 63"},
		{name: "no whole batch", n: 30, replicas: 3, global: 64, err: "no step would run; lower the batch size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ddp.Worker{Rank: 1, WorldSize: tc.replicas, Device: d}
			model, err := w.Wrap(ctx, nn.Dense(d, nn.NewRand(1), 4, 1), ddp.Batch{Global: tc.global, Seed: 1})
			require.NoError(t, err)
			defer model.Close()
			feed, err := training.NewFeed(w, model, tc.n)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []int{tc.batch, tc.slots, tc.steps, tc.want}, []int{feed.Batch, feed.Slots, feed.StepsPerEpoch, feed.Global})
			assert.Equal(t, tc.note, feed.Note)
			assert.False(t, feed.Deterministic())
		})
	}
	_, err := training.NewFeed(ddp.Worker{WorldSize: 1, Device: d}, mustWrap(t, d), 10)
	assert.ErrorContains(t, err, "the model has no global batch: wrap it with Worker.Wrap")

}

func mustWrap(t *testing.T, d *xla.Device) *ddp.DistributedDataParallel {
	m, err := ddp.Wrap(xlatest.Context(t), nn.Dense(d, nn.NewRand(1), 4, 1))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// fixture is a loop over 40 samples in global batches of 5 (8 steps an
// epoch) of a one-replica job, kept in o's directory.
type fixture struct {
	ctx    context.Context
	model  *ddp.DistributedDataParallel
	opt    optim.Optimizer
	feed   *training.Feed
	loader *data.Loader
	loop   *training.Loop
}

func newFixture(t *testing.T, o checkpoint.Options) *fixture {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	set, err := data.NewRandom(40, []int{4}, []int{1}, 0, 1)
	require.NoError(t, err)
	w := ddp.Worker{WorldSize: 1, Device: d, Checkpoints: o}
	model, err := w.Wrap(ctx, nn.Dense(d, nn.NewRand(1), 4, 1), ddp.Batch{Global: 5, Seed: 3})
	require.NoError(t, err)
	t.Cleanup(model.Close)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.01})
	require.NoError(t, err)
	feed, err := training.NewFeed(w, model, set.Len())
	require.NoError(t, err)
	loader, err := data.NewLoader(set, d, data.LoaderConfig{BatchSize: feed.Batch, DropLast: true, Sampler: feed.Sampler})
	require.NoError(t, err)
	loop, err := training.Open(ctx, w, feed, optim.Checkpoint{Model: model, Optimizer: opt, RNG: d})
	require.NoError(t, err)
	return &fixture{ctx: ctx, model: model, opt: opt, feed: feed, loader: loader, loop: loop}
}

// steps are epoch's steps, each trained (MSE) before it is yielded.
func (f *fixture) steps(t *testing.T, epoch int) iter.Seq[training.Step] {
	return func(yield func(training.Step) bool) {
		for st, err := range f.loop.Steps(f.ctx, epoch, f.feed.Steps(f.loader.Epoch(f.ctx, epoch)), 0) {
			require.NoError(t, err)
			_, err := f.feed.TrainStep(f.ctx, f.opt, st, f.loop.Position().Step, func(b data.Batch) *xla.Tensor {
				return nn.MSELoss(f.model.Forward(b.Input), b.Target, nn.ReductionMean)
			})
			require.NoError(t, err)
			if !yield(st) {
				return
			}
		}
	}
}

// run trains the fixture's loop for 2 epochs, stopping after stop steps
// (0: never); it returns every step's samples and the loop's position at
// the end.
func run(t *testing.T, o checkpoint.Options, stop int) (samples [][]int, at training.Position, resumed string) {
	f := newFixture(t, o)
	defer func() { require.NoError(t, f.loop.Close()) }()
	for epoch := range f.loop.Epochs(f.ctx, 2) {
		for st := range f.steps(t, epoch) {
			samples = append(samples, append([]int(nil), st.Batches[0].Samples...))
			if stop > 0 && f.loop.Position().Step+1 == stop {
				return samples, f.loop.Position(), f.loop.Resumed()
			}
		}
	}
	return samples, f.loop.Position(), f.loop.Resumed()
}

// TestLoopResumesWhereItStood: a loop stopped after 10 steps (its last
// checkpoint at step 9) resumes in its directory at step 9, the second
// epoch's first step done, and trains on the very samples an
// uninterrupted run trains on; without a directory it only counts.
func TestLoopResumesWhereItStood(t *testing.T) {
	whole, at, resumed := run(t, checkpoint.Options{}, 0)
	require.Len(t, whole, 16)
	assert.Equal(t, training.Position{Epoch: 1, Samples: 40, Step: 16}, at)
	assert.Empty(t, resumed)

	o := checkpoint.Options{Dir: t.TempDir(), Every: 3}
	first, _, _ := run(t, o, 10)
	require.Len(t, first, 10)
	rest, at, resumed := run(t, o, 0)
	assert.Contains(t, resumed, "resumed from "+o.Dir+" at step 9 (epoch 2, sample 5 of its order)")
	assert.Equal(t, training.Position{Epoch: 1, Samples: 40, Step: 16}, at)
	assert.Equal(t, whole[9:], rest, "the resumed run's samples are the uninterrupted run's from step 10 on")
	assert.FileExists(t, filepath.Join(o.Dir, "step-000000000016.safetensors"), "the last step is committed whatever Every says")
	again, at, resumed := run(t, o, 0)
	assert.Empty(t, again, "the same command after the end has nothing left to train")
	assert.Contains(t, resumed, "at step 16")
	assert.Equal(t, 16, at.Step)
}

// TestLoopLoadsAStepFileWhereItStood: a step file of a checkpoint
// directory given as a file (the examples' --resume --checkpoint) resumes
// where it stood, not at its epoch's start.
func TestLoopLoadsAStepFileWhereItStood(t *testing.T) {
	whole, _, _ := run(t, checkpoint.Options{}, 0)
	o := checkpoint.Options{Dir: t.TempDir(), Every: 3}
	run(t, o, 10)
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	w := ddp.Worker{WorldSize: 1, Device: d}
	model, err := w.Wrap(ctx, nn.Dense(d, nn.NewRand(1), 4, 1), ddp.Batch{Global: 5, Seed: 3})
	require.NoError(t, err)
	defer model.Close()
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.01})
	require.NoError(t, err)
	feed, err := training.NewFeed(w, model, 40)
	require.NoError(t, err)
	loop, err := training.Open(ctx, w, feed, optim.Checkpoint{Model: model, Optimizer: opt, RNG: d})
	require.NoError(t, err)
	defer func() { require.NoError(t, loop.Close()) }()
	require.NoError(t, loop.LoadFile(ctx, filepath.Join(o.Dir, "step-000000000009.safetensors")))
	assert.Equal(t, training.Position{Epoch: 1, Samples: 5, Step: 9}, loop.Position())
	set, err := data.NewRandom(40, []int{4}, []int{1}, 0, 1)
	require.NoError(t, err)
	loader, err := data.NewLoader(set, d, data.LoaderConfig{BatchSize: feed.Batch, DropLast: true, Sampler: feed.Sampler})
	require.NoError(t, err)
	for st, err := range loop.Steps(ctx, 1, feed.Steps(loader.Epoch(ctx, 1)), 0) {
		require.NoError(t, err)
		assert.Equal(t, whole[9], st.Batches[0].Samples, "the step after the file's is the uninterrupted run's")
		break
	}
}

// TestLoopRefusesForeignCheckpoints: a checkpoint directory another
// program filled (no position in it) is refused, saying what to do, and
// an export cannot be loaded over a resumed loop.
func TestLoopRefusesForeignCheckpoints(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	dir := t.TempDir()
	model := nn.Dense(d, nn.NewRand(1), 4, 1)
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.01})
	require.NoError(t, err)
	steps, finish := checkpoint.Steps(ctx, checkpoint.Options{Dir: dir}, 1, optim.Checkpoint{Model: model, Optimizer: opt})
	for range steps {
	}
	require.NoError(t, finish())

	w := ddp.Worker{WorldSize: 1, Device: d, Checkpoints: checkpoint.Options{Dir: dir}}
	wrapped, err := w.Wrap(ctx, model, ddp.Batch{Global: 5, Seed: 3})
	require.NoError(t, err)
	defer wrapped.Close()
	feed, err := training.NewFeed(w, wrapped, 40)
	require.NoError(t, err)
	_, err = training.Open(ctx, w, feed, optim.Checkpoint{Model: wrapped, Optimizer: opt})
	assert.ErrorContains(t, err, "training.epoch_position is \"\", not a count: a checkpoint no training loop wrote; move it away to start afresh")

	o := checkpoint.Options{Dir: t.TempDir(), Every: 1}
	run(t, o, 2)
	w.Checkpoints = o
	loop, err := training.Open(ctx, w, feed, optim.Checkpoint{Model: wrapped, Optimizer: opt, RNG: d})
	require.NoError(t, err)
	defer func() { require.NoError(t, loop.Close()) }()
	assert.ErrorContains(t, loop.LoadFile(ctx, "export.safetensors"), "the loop already resumed from its checkpoint directory")
}
