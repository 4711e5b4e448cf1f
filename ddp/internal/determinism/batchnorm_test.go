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

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// The BatchNorm job: a global batch of 12 images [2, 3, 3] in micro-shards
// of 3, through BatchNorm2d first (so its statistics are the input's,
// checkable on the host), a convolution and a linear head.
const bnGlobal, bnShard, bnChannels, bnSide = 12, 3, 2, 3

// bnImages is step's global batch, [bnGlobal, bnChannels, bnSide, bnSide]
// flat, and its targets: the data depend on the step alone.
func bnImages(step int) (x, y []float32) {
	rng := rand.New(rand.NewPCG(uint64(step), 99))
	for range bnGlobal * bnChannels * bnSide * bnSide {
		x = append(x, float32(3+2*rng.NormFloat64()))
	}
	for range bnGlobal {
		y = append(y, float32(rng.NormFloat64()))
	}
	return x, y
}

// bnRun is replica 0's view of a BatchNorm job: its parameters, and its
// buffers by name.
type bnRun struct {
	params  []float32
	buffers map[string][]float32
	tracked int64
}

// trainBatchNorm trains the BatchNorm job for steps steps on replicas
// local replicas.
func trainBatchNorm(t *testing.T, replicas, steps int) (bnRun, error) {
	e := xlatest.NewDeterministicEngine(t, replicas)
	var (
		mu  sync.Mutex
		out bnRun
	)
	err := e.RunReplicas(xlatest.Context(t), replicas, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		bn, err1 := nn.NewBatchNorm2d(d, bnChannels)
		conv, err2 := nn.NewConv2d(d, nn.NewRand(3), nn.Conv2dConfig{In: bnChannels, Out: 4, Kernel: 3, Padding: 1, Bias: true})
		head, err3 := nn.NewLinear(d, nn.NewRand(4), 4*bnSide*bnSide, 1, true)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		model, err := ddp.Wrap(ctx, nn.NewSequential(bn, conv, nn.ReLU{}, nn.Flatten{}, head), ddp.Deterministic(bnGlobal, bnShard, 5))
		if err != nil {
			return err
		}
		defer model.Close()
		opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.05, Momentum: 0.9})
		if err != nil {
			return err
		}
		for step := range steps {
			xs, ys := bnImages(step)
			opt.ZeroGrad()
			_, err := model.BackwardMicroShards(ctx, step, func(m ddp.MicroShard) (*xla.Tensor, error) {
				per := bnChannels * bnSide * bnSide
				x, err := xla.FromSlice(d, xs[m.First*per:(m.First+m.Size)*per], m.Size, bnChannels, bnSide, bnSide)
				if err != nil {
					return nil, err
				}
				y, err := xla.FromSlice(d, ys[m.First:m.First+m.Size], m.Size, 1)
				if err != nil {
					return nil, err
				}
				return nn.MSELoss(model.Forward(x), y, nn.ReductionMean), nil
			})
			if err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if err := d.MarkStep(ctx); err != nil {
				return err
			}
		}
		run := bnRun{buffers: map[string][]float32{}}
		for _, p := range nn.Parameters(model) {
			v, err := p.Float32s(ctx)
			if err != nil {
				return err
			}
			run.params = append(run.params, v...)
		}
		for _, b := range nn.NamedBuffers(model) {
			if b.Tensor.DType() != xla.Float32 {
				v, err := b.Tensor.Item(ctx)
				if err != nil {
					return err
				}
				run.tracked = int64(v)
				continue
			}
			if run.buffers[b.Name], err = b.Tensor.Float32s(ctx); err != nil {
				return err
			}
		}
		if index, _ := d.Replica(); index == 0 {
			mu.Lock()
			out = run
			mu.Unlock()
		}
		return nil
	})
	return out, err
}

// bnReference is the running statistics after one step in float64: the
// momentum update (0.1) by the mean over the micro-shards of each one's
// per-channel mean and unbiased variance of the input.
func bnReference() (mean, variance []float64) {
	xs, _ := bnImages(0)
	area := bnSide * bnSide
	shards := bnGlobal / bnShard
	mean, variance = make([]float64, bnChannels), make([]float64, bnChannels)
	for c := range bnChannels {
		for k := range shards {
			var vals []float64
			for i := k * bnShard; i < (k+1)*bnShard; i++ {
				for j := range area {
					vals = append(vals, float64(xs[(i*bnChannels+c)*area+j]))
				}
			}
			m, v := 0.0, 0.0
			for _, x := range vals {
				m += x
			}
			m /= float64(len(vals))
			for _, x := range vals {
				v += (x - m) * (x - m)
			}
			v /= float64(len(vals) - 1)
			mean[c] += m / float64(shards)
			variance[c] += v / float64(shards)
		}
		mean[c] = 0.9*0 + 0.1*mean[c]
		variance[c] = 0.9*1 + 0.1*variance[c]
	}
	return mean, variance
}

// TestDeterministicBatchNormBuffers: BatchNorm's running statistics take
// the mean of the micro-shards' updates (a float64 reference after one
// step, within 1e-6), the batch counter counts steps, and parameters and
// buffers are the same bits on 1, 2, 3 and 4 local replicas (4 micro-shards
// over 3: one replica takes two).
func TestDeterministicBatchNormBuffers(t *testing.T) {
	one, err := trainBatchNorm(t, 1, 1)
	require.NoError(t, err)
	mean, variance := bnReference()
	assert.InDeltaSlice(t, mean, toFloat64(one.buffers["0.running_mean"]), 1e-6, "running_mean")
	assert.InDeltaSlice(t, variance, toFloat64(one.buffers["0.running_var"]), 1e-6, "running_var")
	assert.Equal(t, int64(1), one.tracked, "num_batches_tracked")

	want, err := trainBatchNorm(t, 1, 3)
	require.NoError(t, err)
	assert.Equal(t, int64(3), want.tracked)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n, " replicas"), func(t *testing.T) {
			got, err := trainBatchNorm(t, n, 3)
			require.NoError(t, err)
			require.Equal(t, want.params, got.params, "parameters, bit for bit")
			require.Equal(t, want.buffers, got.buffers, "running statistics, bit for bit")
			assert.Equal(t, want.tracked, got.tracked)
		})
	}
}

func toFloat64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
