package zero_test

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// adamStep trains model one step on its rows of the "wide" batch.
func adamStep(ctx context.Context, d *xla.Device, model nn.Module, opt optim.Optimizer, lo, hi int) error {
	opt.ZeroGrad()
	loss, err := ddptest.LossOn(d, model, "wide", lo, hi)
	if err != nil {
		return err
	}
	return optim.BackwardStep(ctx, loss, opt)
}

// TestZeroShardBytes measures, from the live device buffers, the Adam
// state each of N = 2, 3, 4 replicas holds for the "wide" model (131,077
// parameters: divisible by none of them) against the plain optimizer's S:
// at most ⌈S/N⌉ + 1%. The float32 master shard is counted apart: plain
// Adam updates float32 parameters in place, the sharded one keeps this
// replica's shard of them as well (1/N of the parameters).
func TestZeroShardBytes(t *testing.T) {
	e := xlatest.NewEngine(t, 4)
	ctx := xlatest.Context(t)
	d := e.Device(0)
	adam := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
		return optim.NewAdam(groups[0].Params, optim.AdamConfig{LR: 1e-3})
	}
	model, err := ddptest.NewModel(d, "wide", 1, nil)
	require.NoError(t, err)
	params := nn.NumParameters(model)
	require.EqualValues(t, 131077, params)
	plain, err := adam([]optim.ParamGroup{{Params: nn.Parameters(model)}})
	require.NoError(t, err)
	require.NoError(t, adamStep(ctx, d, model, plain, 0, ddptest.GlobalRows))
	var full int64
	for _, s := range plain.State() {
		n, err := s.Tensor.DeviceBytes(ctx)
		require.NoError(t, err)
		full += n
	}
	t.Logf("plain Adam, %d parameters: %d bytes of state", params, full)
	for _, n := range []int{2, 3, 4} {
		state, masters := make([]int64, n), make([]int64, n)
		err := e.RunReplicas(ctx, n, func(ctx context.Context, r xla.Replica) error {
			inner, err := ddptest.NewModel(r.Device(), "wide", 1, nil)
			if err != nil {
				return err
			}
			wrapped, err := ddp.Wrap(ctx, inner)
			if err != nil {
				return err
			}
			defer wrapped.Close()
			z, err := zero.New(ctx, wrapped, nil, adam)
			if err != nil {
				return err
			}
			rows := ddptest.GlobalRows / n
			if err := adamStep(ctx, r.Device(), wrapped, z, r.Index()*rows, (r.Index()+1)*rows); err != nil {
				return err
			}
			state[r.Index()], masters[r.Index()], err = z.ShardBytes(ctx)
			return err
		})
		require.NoError(t, err, "N=%d", n)
		limit := math.Ceil(float64(full)/float64(n)) * 1.01
		for i := range n {
			t.Logf("N=%d replica %d: %d bytes of Adam state (%.5f of ⌈S/N⌉), %d bytes of float32 master shard", n, i, state[i],
				float64(state[i])/math.Ceil(float64(full)/float64(n)), masters[i])
			assert.LessOrEqual(t, float64(state[i]), limit, "N=%d replica %d", n, i)
		}
	}
}

// TestLongZeroWireBytes: across 2, 3 and 4 processes over loopback TCP
// (shared memory off), each rank writes within 0.1% of the bytes training
// the "wide" model sharded as with the plain wrapper: the reduce-scatter
// and the all-gather together carry what the all-reduce carries, plus the
// last shard's padding (131,077 parameters padded to a multiple of N:
// 8(N-1)/N bytes per padded element per step) and the one-time layout
// check (about 5 KB).
func TestLongZeroWireBytes(t *testing.T) {
	const steps = 20
	for _, n := range []int{2, 3, 4} {
		env := []string{"XLADDP_TEST_TIMEOUT=120s", "XLADDP_TEST_MODEL=wide", "XLADDP_TEST_OPTIM=adam", "XLADDP_TEST_DEVICES=1",
			"XLADDP_TEST_MICRO=1", "XLADDP_TEST_STEPS=" + strconv.Itoa(steps), dist.EnvShmMiB + "=0",
			// The bytes counted are every write of the process: without the
			// disk cache, whichever rank compiles a program for the others
			// writes no executable.
			xla.EnvCacheDir + "=off"}
		written := func(wrap string) []int64 {
			cmds, outs := ddptest.Launch(t, "equivalence", n, append(env, "XLADDP_TEST_WRAP="+wrap)...)
			var out []int64
			for r, rep := range ddptest.WaitReports(t, cmds, outs) {
				require.Empty(t, rep.Error, "rank %d (%s)", r, wrap)
				out = append(out, rep.Counters["bytes written"])
			}
			return out
		}
		plain, sharded := written(""), written("zero")
		for r := range n {
			t.Logf("N=%d rank %d: %d bytes written per step plain, %d sharded (%d steps, set-up included)", n, r,
				plain[r]/steps, sharded[r]/steps, steps)
			assert.Positive(t, plain[r], "N=%d rank %d", n, r)
			assert.LessOrEqual(t, float64(sharded[r]), 1.001*float64(plain[r]), "N=%d rank %d", n, r)
		}
	}
}
