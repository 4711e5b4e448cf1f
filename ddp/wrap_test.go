package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func init() { groupScenarios["wrap-across-processes"] = wrapAcrossProcessesScenario }

// toyBatch is the global batch: 16 rows of x (10) and y (5), fixed.
func toyBatch() (x, y []float32) {
	rng := rand.New(rand.NewPCG(7, 8))
	x, y = make([]float32, 16*10), make([]float32, 16*5)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.NormFloat64())
	}
	return x, y
}

// trainToy trains the toy (10→10→5, MSE, SGD lr 0.1) for steps steps on
// rows [lo, hi) of the global batch, wrapped when wrap is set, with micro
// micro-batches per step accumulated under NoSync; it returns the
// parameters.
func trainToy(ctx context.Context, d *xla.Device, seed uint64, lo, hi, steps, micro int, wrap bool, mark func() error) ([][]float32, error) {
	rng := nn.NewRand(seed)
	l1, err := nn.NewLinear(d, rng, 10, 10, true)
	if err != nil {
		return nil, err
	}
	l2, err := nn.NewLinear(d, rng, 10, 5, true)
	if err != nil {
		return nil, err
	}
	var model nn.Module = nn.NewSequential(l1, nn.ReLU{}, l2)
	var wrapped *DistributedDataParallel
	if wrap {
		if wrapped, err = Wrap(model, WrapOptions{}); err != nil {
			return nil, err
		}
		defer wrapped.Close()
		model = wrapped
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.1})
	if err != nil {
		return nil, err
	}
	xs, ys := toyBatch()
	rows := (hi - lo) / micro
	batches := make([][2]*xla.Tensor, micro)
	for m := range micro {
		a, b := lo+m*rows, lo+(m+1)*rows
		x, err := xla.FromSlice(d, xs[a*10:b*10], b-a, 10)
		if err != nil {
			return nil, err
		}
		y, err := xla.FromSlice(d, ys[a*5:b*5], b-a, 5)
		if err != nil {
			return nil, err
		}
		batches[m] = [2]*xla.Tensor{x, y}
	}
	backward := func(m int) error {
		// Sum of micro-batch means / micro = the mean over the rows.
		return nn.MSELoss(model.Forward(batches[m][0]), batches[m][1], nn.ReductionMean).DivScalar(float64(micro)).Backward()
	}
	for range steps {
		opt.ZeroGrad()
		if micro > 1 {
			err = wrapped.NoSync(func() error {
				for m := range micro - 1 {
					if err := backward(m); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		if err := backward(micro - 1); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, err
		}
		if err := mark(); err != nil {
			return nil, err
		}
	}
	var out [][]float32
	for _, p := range nn.Parameters(model) {
		v, err := p.Float32s(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// TestWrapEqualsSingleDevice: the toy trained 20 steps on 4 local
// replicas, each with its quarter of the global batch and its own seed,
// equals single-device training on the whole batch from replica 0's
// initial weights within 1e-5 relative, and the replicas are
// bit-identical; with NoSync over 4 micro-batches too.
func TestWrapEqualsSingleDevice(t *testing.T) {
	const n, steps = 4, 20
	e := xlatest.NewEngine(t, n)
	ctx := context.Background()
	d := e.Device(0)
	want, err := trainToy(ctx, d, 100, 0, 16, steps, 1, false, func() error { return d.MarkStep(ctx) })
	require.NoError(t, err)
	for _, micro := range []int{1, 4} {
		got := make([][][]float32, n)
		err := e.RunReplicas(ctx, n, func(ctx context.Context, r xla.Replica) error {
			var err error
			got[r.Index()], err = trainToy(ctx, r.Device(), 100+uint64(r.Index()), 4*r.Index(), 4*r.Index()+4, steps, micro, true,
				func() error { return r.MarkStep(ctx) })
			return err
		})
		require.NoError(t, err, "micro-batches %d", micro)
		for r := range n {
			assert.Equal(t, got[0], got[r], "micro-batches %d: replica %d differs from replica 0", micro, r)
		}
		for i := range want {
			for j := range want[i] {
				tol := 1e-5 * math.Max(1, math.Abs(float64(want[i][j])))
				assert.InDelta(t, want[i][j], got[0][i][j], tol, "micro-batches %d: parameter %d[%d]", micro, i, j)
			}
		}
	}
}

// TestWrapRefusesBadModules: nil, empty and split modules are errors that
// say what to do.
func TestWrapRefusesBadModules(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	_, err := Wrap(nil, WrapOptions{})
	assert.ErrorContains(t, err, "nil module")
	_, err = Wrap(nn.NewSequential(nn.ReLU{}), WrapOptions{})
	assert.ErrorContains(t, err, "no parameters or buffers")
	a, err := nn.NewLinear(e.Device(0), nn.NewRand(1), 2, 2, true)
	require.NoError(t, err)
	b, err := nn.NewLinear(e.Device(1), nn.NewRand(1), 2, 2, true)
	require.NoError(t, err)
	_, err = Wrap(nn.NewSequential(a, b), WrapOptions{})
	assert.ErrorContains(t, err, "move the module to one device first")
}

// TestWrapSubsetOfReplicas: when only replica 0 wraps its model, the
// replicas trace different steps: RunReplicas fails with a mismatch
// naming them, promptly, instead of hanging in the all-reduce.
func TestWrapSubsetOfReplicas(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	start := time.Now()
	err := e.RunReplicas(xlatest.Context(t), 2, func(ctx context.Context, r xla.Replica) error {
		_, err := trainToy(ctx, r.Device(), 1, 0, 8, 2, 1, r.Index() == 0, func() error { return r.MarkStep(ctx) })
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
		m, err := Wrap(lin, WrapOptions{})
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

// wrapAcrossProcessesScenario: in a job whose default group has several
// ranks, Wrap refuses rather than averaging over the local replicas only;
// after Destroy it wraps.
func wrapAcrossProcessesScenario(rep *report) {
	ctx := context.Background()
	if err := Init(ctx, workerOptions()); err != nil {
		rep.Error = err.Error()
		return
	}
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	if err != nil {
		rep.Error = err.Error()
		return
	}
	e := xla.NewEngine(b)
	defer e.Close()
	lin, err := nn.NewLinear(e.Device(0), nn.NewRand(1), 2, 2, true)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	_, err = Wrap(lin, WrapOptions{})
	if !errors.Is(err, ErrAcrossProcesses) {
		rep.Failures = append(rep.Failures, fmt.Sprintf("Wrap in a %d-rank group: %v", WorldSize(), err))
	}
	rep.Hashes["error"] = fmt.Sprint(err)
	if err := Destroy(); err != nil {
		rep.Failures = append(rep.Failures, "Destroy: "+err.Error())
	}
	if m, err := Wrap(lin, WrapOptions{}); err != nil {
		rep.Failures = append(rep.Failures, "Wrap after Destroy: "+err.Error())
	} else {
		m.Close()
	}
}

func TestWrapRefusesAMultiProcessGroup(t *testing.T) {
	cmds, outs := launch(t, "wrap-across-processes", 2, "XLADDP_TEST_TIMEOUT=20s")
	for r, rep := range waitReports(t, cmds, outs) {
		assert.Empty(t, rep.Error, "rank %d", r)
		assert.Empty(t, rep.Failures, "rank %d", r)
		assert.Contains(t, rep.Hashes["error"], "the default process group has 2 ranks", "rank %d", r)
	}
}
