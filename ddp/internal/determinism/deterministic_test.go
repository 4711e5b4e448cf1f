package determinism_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// sabotage makes one replica's work depend on its index, as a bug in the
// deterministic mode would: the tests below must notice.
type sabotage int

const (
	honest       sabotage = iota
	reversed              // replica 1 feeds its micro-shards' samples in reverse order
	rankedKey             // replica 1 reseeds its dropout with its index mixed in
	rankedSample          // replica 1 reads the samples of the micro-shard after the one it was given
)

// microShardSample is sample i of micro-shard index of step: the data
// depend on the global position alone.
func microShardSample(step, index, size int) (x, y []float32) {
	rng := rand.New(rand.NewPCG(uint64(step), uint64(index)))
	for range size * 10 {
		x = append(x, float32(rng.NormFloat64()))
	}
	for range size * 5 {
		y = append(y, float32(rng.NormFloat64()))
	}
	return x, y
}

// trainDeterministic trains an MLP with dropout (AdamW, clipping) for
// steps deterministic steps of a global batch of 24 in micro-shards of 4
// on replicas local replicas, and returns replica 0's parameters and the
// losses it read.
func trainDeterministic(t *testing.T, replicas, steps int, s sabotage) ([]float32, []float64, error) {
	e := xlatest.NewDeterministicEngine(t, replicas)
	var (
		mu     sync.Mutex
		params []float32
		losses []float64
	)
	err := e.RunReplicas(xlatest.Context(t), replicas, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		l1, err1 := nn.NewLinear(d, nn.NewRand(7), 10, 32, true)
		l2, err2 := nn.NewLinear(d, nn.NewRand(8), 32, 5, true)
		drop, err3 := nn.NewDropout(0.3)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		net := nn.NewSequential(l1, nn.ReLU{}, drop, l2)
		model, err := ddp.Wrap(ctx, net, ddp.Deterministic(24, 4, 11))
		if err != nil {
			return err
		}
		defer model.Close()
		opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamConfig{LR: 0.01, WeightDecay: 0.1})
		if err != nil {
			return err
		}
		index, _ := d.Replica()
		var mine []float64
		for step := range steps {
			opt.ZeroGrad()
			_, first, end, _ := model.MicroShards()
			loss, err := model.BackwardMicroShards(ctx, step, func(m ddp.MicroShard) (*xla.Tensor, error) {
				shard := m.Index
				switch {
				case s == reversed && index == 1 && !m.Padding:
					shard = end - 1 - (m.Index - first)
				case s == rankedKey && index == 1:
					if err := d.ManualSeed(int64(step*1000 + m.Index*10 + index)); err != nil {
						return nil, err
					}
				case s == rankedSample && index == 1:
					shard = (m.Index + 1) % 6
				}
				xs, ys := microShardSample(step, shard, m.Size)
				x, err := xla.FromSlice(d, xs, m.Size, 10)
				if err != nil {
					return nil, err
				}
				y, err := xla.FromSlice(d, ys, m.Size, 5)
				if err != nil {
					return nil, err
				}
				return nn.MSELoss(model.Forward(x), y, nn.ReductionMean), nil
			})
			if err != nil {
				return err
			}
			if _, err := optim.ClipGradNorm(nn.Parameters(model), 0.5, 2); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if err := d.MarkStep(ctx); err != nil {
				return err
			}
			v, err := loss.Item(ctx)
			if err != nil {
				return err
			}
			mine = append(mine, v)
		}
		var flat []float32
		for _, p := range nn.Parameters(model) {
			v, err := p.Float32s(ctx)
			if err != nil {
				return err
			}
			flat = append(flat, v...)
		}
		if index == 0 {
			mu.Lock()
			params, losses = flat, mine
			mu.Unlock()
		}
		return nil
	})
	return params, losses, err
}

// TestDeterministicSameBitsOnAnyReplicaCount: one replica, and 2, 3 and
// 4 (two of them computing a padding micro-shard: 6 over 4) local
// replicas train the same bits, and read the same losses; 5 local
// replicas in one process are refused where the machine has fewer CPUs
// (backend.DeterministicCPUDevices).
func TestDeterministicSameBitsOnAnyReplicaCount(t *testing.T) {
	want, wantLosses, err := trainDeterministic(t, 1, 4, honest)
	require.NoError(t, err)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n, " replicas"), func(t *testing.T) {
			got, losses, err := trainDeterministic(t, n, 4, honest)
			require.NoError(t, err)
			require.Equal(t, want, got, "parameters, bit for bit")
			assert.Equal(t, wantLosses, losses)
		})
	}
	if most := backend.DeterministicCPUDevices(); most < 6 {
		_, _, err := trainDeterministic(t, most+1, 1, honest)
		assert.ErrorContains(t, err, "local replicas in one process: at most")
	}
}

// TestDeterministicCheckCatchesRankDependence proves the test above can
// fail: a replica that reads its micro-shards in another order, keys its
// random state by its index, or reads another micro-shard's samples
// trains other bits.
func TestDeterministicCheckCatchesRankDependence(t *testing.T) {
	want, _, err := trainDeterministic(t, 1, 2, honest)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		s    sabotage
	}{{"micro-shards in reverse on replica 1", reversed}, {"random key mixing the replica", rankedKey}, {"another micro-shard's samples", rankedSample}} {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := trainDeterministic(t, 3, 2, c.s)
			require.NoError(t, err)
			assert.NotEqual(t, want, got, "the sabotaged run must train other bits")
		})
	}
}

// TestDeterministicRefusals: the misuses a user meets get errors that say
// what to do.
func TestDeterministicRefusals(t *testing.T) {
	e := xlatest.NewDeterministicEngine(t, 1)
	d := e.Device(0)
	ctx := xlatest.Context(t)
	lin, err := nn.NewLinear(d, nn.NewRand(1), 3, 2, true)
	require.NoError(t, err)
	_, err = ddp.Wrap(ctx, lin, ddp.Deterministic(10, 4, 1))
	assert.ErrorContains(t, err, "does not divide the global batch of 10")
	_, err = ddp.Wrap(ctx, lin, ddp.Deterministic(8, 0, 1))
	assert.ErrorContains(t, err, "must be positive")

	plain, err := ddp.Wrap(ctx, lin)
	require.NoError(t, err)
	_, err = plain.BackwardMicroShards(ctx, 0, nil)
	assert.ErrorContains(t, err, "without ddp.Deterministic")
	plain.Close()

	model, err := ddp.Wrap(ctx, lin, ddp.Deterministic(8, 4, 1))
	require.NoError(t, err)
	defer model.Close()
	x, err := xla.FromSlice(d, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4, 3)
	require.NoError(t, err)
	lossOf := func(ddp.MicroShard) (*xla.Tensor, error) { return model.Forward(x).Sum(), nil }
	_, err = model.BackwardMicroShards(ctx, -1, lossOf)
	assert.ErrorContains(t, err, "steps count from 0")
	require.NoError(t, model.Forward(x).Sum().Backward())
	_, err = model.BackwardMicroShards(ctx, 0, lossOf)
	assert.ErrorContains(t, err, "call the optimizer's ZeroGrad first")
	for _, p := range nn.Parameters(model) {
		p.ZeroGrad()
	}
	_, err = model.BackwardMicroShards(ctx, 0, func(ddp.MicroShard) (*xla.Tensor, error) { return nil, nil })
	assert.ErrorContains(t, err, "is nil")
	boom := errors.New("boom")
	_, err = model.BackwardMicroShards(ctx, 0, func(ddp.MicroShard) (*xla.Tensor, error) { return nil, boom })
	assert.ErrorIs(t, err, boom)
	assert.ErrorContains(t, model.SyncGradients(ctx), "deterministic wrapper")
}

// TestDeterministicSkippedMarkStepSaysWhatToAdd: a program written from a
// recipe that leaves out the step's MarkStep, rank 0 reading the loss
// alone, makes the replicas run different programs; the replica that
// meets it in BackwardMicroShards says what to add.
func TestDeterministicSkippedMarkStepSaysWhatToAdd(t *testing.T) {
	e := xlatest.NewDeterministicEngine(t, 2)
	errs := make([]error, 2)
	_ = e.RunReplicas(xlatest.Context(t), 2, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		lin, err := nn.NewLinear(d, nn.NewRand(1), 3, 2, true)
		if err != nil {
			return err
		}
		model, err := ddp.Wrap(ctx, lin, ddp.Deterministic(8, 4, 1))
		if err != nil {
			return err
		}
		defer model.Close()
		opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		x, err := xla.FromSlice(d, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4, 3)
		if err != nil {
			return err
		}
		index, _ := d.Replica()
		errs[index] = func() error {
			for step := range 2 {
				opt.ZeroGrad()
				loss, err := model.BackwardMicroShards(ctx, step, func(ddp.MicroShard) (*xla.Tensor, error) { return model.Forward(x).Sum(), nil })
				if err != nil {
					return err
				}
				if err := opt.Step(); err != nil {
					return err
				}
				if index == 0 {
					if _, err := loss.Item(ctx); err != nil {
						return err
					}
				}
			}
			return nil
		}()
		return errs[index]
	})
	require.ErrorIs(t, errs[1], xla.ErrReplicaMismatch)
	assert.ErrorContains(t, errs[1], "every replica ends each step with its device's MarkStep before any of them reads a value")
}
