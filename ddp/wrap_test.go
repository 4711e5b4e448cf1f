package ddp

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestWrapRefusesBadModules: nil, empty and split modules are errors that
// say what to do.
func TestWrapRefusesBadModules(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	_, err := Wrap(ctx, nil)
	assert.ErrorContains(t, err, "nil module")
	_, err = Wrap(ctx, nn.NewSequential(nn.ReLU{}))
	assert.ErrorContains(t, err, "no parameters or buffers")
	a, err := nn.NewLinear(e.Device(0), nn.NewRand(1), 2, 2, true)
	require.NoError(t, err)
	b, err := nn.NewLinear(e.Device(1), nn.NewRand(1), 2, 2, true)
	require.NoError(t, err)
	_, err = Wrap(ctx, nn.NewSequential(a, b))
	assert.ErrorContains(t, err, "move the module to one device first")
	for _, mb := range []float64{0, -1, math.NaN(), math.Inf(1), 1e9} {
		_, err = Wrap(ctx, a, BucketCapMB(mb))
		assert.ErrorContains(t, err, "give a size in MiB above 0", "BucketCapMB(%v)", mb)
	}
}

// TestWrapSubsetOfReplicas: when only replica 0 wraps its model, the
// replicas trace different steps: RunReplicas fails with a mismatch
// naming them, promptly, instead of hanging in the all-reduce.
func TestWrapSubsetOfReplicas(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	start := time.Now()
	err := e.RunReplicas(xlatest.Context(t), 2, func(ctx context.Context, r xla.Replica) error {
		_, err := trainModel(ctx, r.Device(), trainRun{kind: "toy", seed: 1, steps: 2, shards: split(0, 8, 1), wrap: r.Index() == 0,
			mark: func() error { return r.MarkStep(ctx) }})
		return err
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, xla.ErrReplicaMismatch)
	assert.Less(t, time.Since(start), 30*time.Second)
}

// TestWrapCloseTwiceAndTrainLocally: after Close the module trains on its
// own (no averaging: replicas with different data diverge), and a second
// Close is harmless.
func TestWrapCloseTwiceAndTrainLocally(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	grads := make([][]float32, 2)
	err := e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		lin, err := nn.NewLinear(d, nn.NewRand(uint64(r.Index())), 2, 1, false)
		if err != nil {
			return err
		}
		m, err := Wrap(ctx, lin)
		if err != nil {
			return err
		}
		m.Close()
		m.Close()
		x, err := xla.FromSlice(d, []float32{float32(r.Index() + 1), 0}, 1, 2)
		if err != nil {
			return err
		}
		if err := m.Forward(x).Sum().Backward(); err != nil {
			return err
		}
		grads[r.Index()], err = lin.Weight.Grad().Float32s(ctx)
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 0}, grads[0])
	assert.Equal(t, []float32{2, 0}, grads[1])
}
