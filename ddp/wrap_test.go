package ddp_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestWrapRefusesBadModules: nil, empty and split modules are errors that
// say what to do.
func TestWrapRefusesBadModules(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	_, err := ddp.Wrap(ctx, nil)
	assert.ErrorContains(t, err, "nil module")
	_, err = ddp.Wrap(ctx, nn.NewSequential(nn.ReLU{}))
	assert.ErrorContains(t, err, "no parameters or buffers")
	a, err := nn.NewLinear(e.Device(0), nn.NewRand(1), 2, 2, true)
	require.NoError(t, err)
	b, err := nn.NewLinear(e.Device(1), nn.NewRand(1), 2, 2, true)
	require.NoError(t, err)
	_, err = ddp.Wrap(ctx, nn.NewSequential(a, b))
	assert.ErrorContains(t, err, "move the module to one device first")
	for _, mb := range []float64{0, -1, math.NaN(), math.Inf(1), 1e9} {
		_, err = ddp.Wrap(ctx, a, ddp.BucketCapMB(mb))
		assert.ErrorContains(t, err, "give a size in MiB above 0", "BucketCapMB(%v)", mb)
	}
	_, err = ddp.Wrap(ctx, nn.NewSequential(a, nn.Dense(e.Device(0), nn.NewRand(1), -1, 2)))
	assert.ErrorContains(t, err, "the module failed to build: 1: nn: Dense(-1, 2)")
	assert.ErrorContains(t, ddp.Run(ctx, nil, ddp.Options{}), "nil function")
	t.Setenv("XLADDP_DEVICE", "tpu")
	assert.ErrorContains(t, ddp.Run(ctx, func(context.Context, ddp.Worker) error { return nil }, ddp.Options{Spawn: true}), `"tpu"`)
}

// TestWrapSubsetOfReplicas: when only replica 0 wraps its model, the
// replicas trace different steps: RunReplicas fails with a mismatch
// naming them, promptly, instead of hanging in the all-reduce.
func TestWrapSubsetOfReplicas(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	start := time.Now()
	err := e.RunReplicas(xlatest.Context(t), 2, func(ctx context.Context, r xla.Replica) error {
		_, err := ddptest.TrainModel(ctx, r.Device(), ddptest.Run{Kind: "toy", Seed: 1, Steps: 2, Shards: ddptest.Split(0, 8, 1), Wrap: r.Index() == 0,
			Mark: func() error { return r.MarkStep(ctx) }})
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
		m, err := ddp.Wrap(ctx, lin)
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

// TestWrapStateDictNames: the wrapper's state dict has the inner module's
// names by default and torch's "module."-prefixed ones with
// TorchStateDictNames; either loads into the other's model through a
// saved file.
func TestWrapStateDictNames(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	d := e.Device(0)
	model, err := ddptest.NewModel(d, "cnn", 1, nil)
	require.NoError(t, err)
	plain, err := ddp.Wrap(ctx, model)
	require.NoError(t, err)
	defer plain.Close()
	torchy, err := ddp.Wrap(ctx, model, ddp.TorchStateDictNames())
	require.NoError(t, err)
	defer torchy.Close()
	var names, torchNames []string
	for _, n := range nn.StateDict(plain) {
		names = append(names, n.Name)
	}
	for _, n := range nn.StateDict(torchy) {
		torchNames = append(torchNames, n.Name)
	}
	require.Equal(t, len(names), len(torchNames))
	assert.Contains(t, names, "1.running_mean")
	for i := range names {
		assert.Equal(t, "module."+names[i], torchNames[i])
	}
	path := filepath.Join(t.TempDir(), "torch.safetensors")
	require.NoError(t, nn.SaveStateDict(ctx, path, torchy, nil))
	fresh, err := ddptest.NewModel(d, "cnn", 2, nil)
	require.NoError(t, err)
	freshWrapped, err := ddp.Wrap(ctx, fresh, ddp.TorchStateDictNames())
	require.NoError(t, err)
	defer freshWrapped.Close()
	_, err = nn.LoadStateDict(path, freshWrapped)
	require.NoError(t, err)
	_, err = nn.LoadStateDict(path, fresh)
	assert.ErrorContains(t, err, "module.", "a prefixed file does not load into the bare model")
}

// scaled multiplies its input by a buffer.
type scaled struct {
	lin   *nn.Linear
	scale *xla.Tensor
}

func (s *scaled) Forward(x *xla.Tensor) *xla.Tensor { return s.lin.Forward(x).Mul(s.scale) }
func (s *scaled) Params() []nn.Named                { return nil }
func (s *scaled) Buffers() []nn.Named               { return []nn.Named{{Name: "scale", Tensor: s.scale}} }
func (s *scaled) Children() []nn.NamedModule        { return []nn.NamedModule{{Name: "lin", Module: s.lin}} }

// TestWrapBroadcastBuffers: at each Forward the replicas' buffers take
// replica 0's values, unless BroadcastBuffers(false).
func TestWrapBroadcastBuffers(t *testing.T) {
	for _, on := range []bool{true, false} {
		e := xlatest.NewEngine(t, 2)
		outs := make([][]float32, 2)
		err := e.RunReplicas(xlatest.Context(t), 2, func(ctx context.Context, r xla.Replica) error {
			d := r.Device()
			lin, err := nn.NewLinear(d, nn.NewRand(1), 2, 1, false)
			if err != nil {
				return err
			}
			one, err := xla.FromSlice(d, []float32{1})
			if err != nil {
				return err
			}
			m, err := ddp.Wrap(ctx, &scaled{lin: lin, scale: one}, ddp.BroadcastBuffers(on))
			if err != nil {
				return err
			}
			defer m.Close()
			// Replica 1's buffer drifts after Wrap (same program on both:
			// the factor is an input).
			factor, err := xla.FromSlice(d, []float32{float32(1 + 4*r.Index())})
			if err != nil {
				return err
			}
			if err := one.Assign(one.Mul(factor)); err != nil {
				return err
			}
			x, err := xla.FromSlice(d, []float32{1, 1}, 1, 2)
			if err != nil {
				return err
			}
			outs[r.Index()], err = m.Forward(x).Float32s(ctx)
			return err
		})
		require.NoError(t, err)
		if on {
			assert.Equal(t, outs[0], outs[1], "replica 1 did not take replica 0's buffer")
		} else {
			assert.InDelta(t, 5*outs[0][0], outs[1][0], 1e-6, "replica 1 lost its own buffer")
		}
	}
}
