package data_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// shard gives replica rank every world-th index of a shuffled epoch (the
// DDP layer's DistributedSampler does this for processes).
type shard struct {
	base        data.Sampler
	rank, world int
}

func (s shard) Indices(epoch int) []int {
	all := s.base.Indices(epoch)
	var out []int
	for i := s.rank; i < len(all); i += s.world {
		out = append(out, all[i])
	}
	return out
}

func newMLP(d *xla.Device) (nn.Module, error) {
	l1, err := nn.NewLinear(d, nn.NewRand(1), 784, 128, true)
	if err != nil {
		return nil, err
	}
	l2, err := nn.NewLinear(d, nn.NewRand(2), 128, 10, true)
	return nn.NewSequential(nn.Flatten{}, l1, nn.ReLU{}, l2), err
}

// TestMNISTTwoReplicasOneEpoch trains a 784-128-10 MLP for one epoch of the
// real MNIST on 2 CPU replicas (batch 64 each, SGD lr 0.05 momentum 0.9,
// gradients averaged in-graph), then evaluates on the 10,000 test images:
// accuracy must reach 95%, and the whole test must take under 60 s.
func TestMNISTTwoReplicasOneEpoch(t *testing.T) {
	start := time.Now()
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	trainSet, err := data.NewMNIST(data.DefaultMNISTDir(), true)
	require.NoError(t, err, "MNIST must be installed: run `make deps`")
	testSet, err := data.NewMNIST(data.DefaultMNISTDir(), false)
	require.NoError(t, err)
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 2})
	require.NoError(t, err)
	defer b.Close()
	eng := xla.NewEngine(b)

	models := make([]nn.Module, 2)
	waits := make([]data.Stats, 2)
	err = eng.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		model, err := newMLP(d)
		if err != nil {
			return err
		}
		models[r.Index()] = model
		opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.05, Momentum: 0.9})
		if err != nil {
			return err
		}
		sampler := shard{base: data.RandomSampler{N: trainSet.Len(), Seed: 7}, rank: r.Index(), world: 2}
		loader, err := data.NewLoader(trainSet, d, data.LoaderConfig{BatchSize: 64, DropLast: true, Sampler: sampler})
		if err != nil {
			return err
		}
		for batch, err := range loader.Epoch(ctx, 0) {
			if err != nil {
				return err
			}
			opt.ZeroGrad()
			loss := nn.CrossEntropyLoss(model.Forward(batch.Input), batch.Target, nn.ReductionMean)
			if err := loss.Backward(); err != nil {
				return err
			}
			for _, p := range nn.Parameters(model) {
				if err := p.SetGrad(xla.AllReduce(p.Grad(), xla.ReduceMean)); err != nil {
					return err
				}
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if err := r.MarkStep(ctx); err != nil {
				return err
			}
		}
		waits[r.Index()] = loader.Stats()
		return nil
	})
	require.NoError(t, err)
	trained := time.Since(start)

	d := eng.Device(0)
	model := models[0]
	nn.Eval(model)
	loader, err := data.NewLoader(testSet, d, data.LoaderConfig{BatchSize: 1000})
	require.NoError(t, err)
	correct := 0.0
	for batch, err := range loader.Epoch(ctx, 0) {
		require.NoError(t, err)
		hits := model.Forward(batch.Input).ArgMax(1).Equal(batch.Target).Cast(xla.Float32).Sum()
		v, err := hits.Item(ctx)
		require.NoError(t, err)
		correct += v
	}
	accuracy := correct / float64(testSet.Len())
	t.Logf("test accuracy %.4f after 1 epoch; training %v, total %v; input wait %.2f%% / %.2f%% of the loop (replicas 0/1)",
		accuracy, trained.Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
		100*waits[0].WaitFraction(), 100*waits[1].WaitFraction())
	assert.GreaterOrEqual(t, accuracy, 0.95)
	assert.Less(t, time.Since(start), 60*time.Second)
}
