package ddp_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestSplitBatchEqualsOneStepOnTheBatch: DataParallel's case, one host
// batch of 16 rows split over 4 local replicas of a wrapped toy, trained 5
// steps, equals single-device training on the whole batch (1e-5
// relative), with every replica bit-identical.
func TestSplitBatchEqualsOneStepOnTheBatch(t *testing.T) {
	const n, steps = 4, 5
	e := xlatest.NewEngine(t, n)
	ctx := xlatest.Context(t)
	rng := rand.New(rand.NewPCG(3, 4))
	xs, ys := make([]float32, 16*10), make([]float32, 16*5)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	for i := range ys {
		ys[i] = float32(rng.NormFloat64())
	}
	train := func(ctx context.Context, d *xla.Device, wrap bool) ([][]float32, error) {
		model, err := ddptest.NewModel(d, "toy", 5, nil)
		if err != nil {
			return nil, err
		}
		if wrap {
			m, err := ddp.Wrap(ctx, model)
			if err != nil {
				return nil, err
			}
			defer m.Close()
			model = m
		}
		opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
		if err != nil {
			return nil, err
		}
		for range steps {
			x, err := ddp.SplitBatch(d, xs, 16, 10)
			if err != nil {
				return nil, err
			}
			y, err := ddp.SplitBatch(d, ys, 16, 5)
			if err != nil {
				return nil, err
			}
			opt.ZeroGrad()
			if err := nn.MSELoss(model.Forward(x), y, nn.ReductionMean).Backward(); err != nil {
				return nil, err
			}
			if err := opt.Step(); err != nil {
				return nil, err
			}
			if err := d.MarkStep(ctx); err != nil {
				return nil, err
			}
		}
		return ddptest.ParameterValues(ctx, model)
	}
	want, err := train(ctx, e.Device(0), false)
	require.NoError(t, err)
	got := make([][][]float32, n)
	require.NoError(t, e.RunReplicas(ctx, n, func(ctx context.Context, r xla.Replica) error {
		var err error
		got[r.Index()], err = train(ctx, r.Device(), true)
		return err
	}))
	for r := range n {
		assert.Equal(t, got[0], got[r], "replica %d", r)
	}
	for i := range want {
		for j := range want[i] {
			assert.InDelta(t, want[i][j], got[0][i][j], 1e-5*math.Max(1, math.Abs(float64(want[i][j]))), "parameter %d[%d]", i, j)
		}
	}
}

// TestSplitBatchRefusesBadBatches: uneven, empty and mis-sized batches
// are errors that say what to do.
func TestSplitBatchRefusesBadBatches(t *testing.T) {
	e := xlatest.NewEngine(t, 4)
	errs := make([][]error, 4)
	require.NoError(t, e.RunReplicas(xlatest.Context(t), 4, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		_, e1 := ddp.SplitBatch(d, make([]float32, 10*3), 10, 3)
		_, e2 := ddp.SplitBatch(d, []float32{}, 0, 3)
		_, e3 := ddp.SplitBatch(d, make([]float32, 7), 8)
		_, e4 := ddp.SplitBatch[float32](d, nil)
		_, e5 := ddp.SplitBatch(d, make([]float32, 8), 8, -1)
		errs[r.Index()] = []error{e1, e2, e3, e4, e5}
		return nil
	}))
	for r := range 4 {
		assert.ErrorContains(t, errs[r][0], "10 rows do not split evenly over 4 replicas")
		assert.ErrorContains(t, errs[r][1], "0 rows do not split evenly")
		assert.ErrorContains(t, errs[r][2], "7 values for a batch of [8]")
		assert.ErrorContains(t, errs[r][3], "leading rows dimension")
		assert.ErrorContains(t, errs[r][4], "negative dimension")
	}
	x, err := ddp.SplitBatch(e.Device(0), []int32{1, 2, 3}, 3)
	require.NoError(t, err, "a standalone device takes the whole batch")
	assert.Equal(t, []int{3}, x.Dims())
}
