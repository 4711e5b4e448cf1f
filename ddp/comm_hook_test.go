package ddp_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestCommHookReplacesAveraging: on 2 local replicas a registered hook
// runs instead of the averaging, once per Backward outside NoSync (after
// the accumulated ones inside it), with the parameters that have a
// gradient in registration order, and what it leaves in the gradients is
// what the replica keeps: here each replica's own gradient doubled, not
// the mean. With ManualSync it runs in SyncGradients only.
func TestCommHookReplacesAveraging(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	type result struct {
		calls, manualCalls int
		names              []string
		grad               []float32
	}
	results := make([]result, 2)
	err := e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		res := &results[r.Index()]
		lin, err := nn.NewLinear(d, nn.NewRand(1), 2, 1, true)
		if err != nil {
			return err
		}
		m, err := ddp.Wrap(ctx, lin)
		if err != nil {
			return err
		}
		defer m.Close()
		double := func(_ context.Context, params []nn.Named) error {
			res.calls++
			res.names = nil
			for _, p := range params {
				res.names = append(res.names, p.Name)
				if err := p.Tensor.SetGrad(p.Tensor.Grad().MulScalar(2)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := m.RegisterCommHook(double); err != nil {
			return err
		}
		x, err := xla.FromSlice(d, []float32{float32(r.Index() + 1), 0}, 1, 2)
		if err != nil {
			return err
		}
		backward := func() error { return m.Forward(x).Sum().Backward() }
		if err := m.NoSync(backward); err != nil {
			return err
		}
		if res.calls != 0 {
			return assert.AnError
		}
		if err := backward(); err != nil {
			return err
		}
		if res.grad, err = lin.Weight.Grad().Float32s(ctx); err != nil {
			return err
		}
		manual, err := ddp.Wrap(ctx, lin, ddp.ManualSync())
		if err != nil {
			return err
		}
		defer manual.Close()
		m.Close()
		if err := manual.RegisterCommHook(func(context.Context, []nn.Named) error { res.manualCalls++; return nil }); err != nil {
			return err
		}
		if err := backward(); err != nil {
			return err
		}
		before := res.manualCalls
		if err := manual.SyncGradients(ctx); err != nil {
			return err
		}
		res.manualCalls -= before
		return nil
	})
	require.NoError(t, err)
	for i, res := range results {
		assert.Equal(t, 1, res.calls, "replica %d: hook calls", i)
		assert.Equal(t, []string{"weight", "bias"}, res.names, "replica %d", i)
		// Two Backwards of x = (i+1, 0): the weight's gradient is 2(i+1), doubled.
		assert.Equal(t, []float32{4 * float32(i+1), 0}, res.grad, "replica %d: its own gradient, doubled", i)
		assert.Equal(t, 1, res.manualCalls, "replica %d: ManualSync runs the hook in SyncGradients only", i)
	}
}

// TestCommHookRefusals: nil, a second hook, a closed wrapper.
func TestCommHookRefusals(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	lin, err := nn.NewLinear(e.Device(0), nn.NewRand(1), 2, 1, true)
	require.NoError(t, err)
	m, err := ddp.Wrap(ctx, lin)
	require.NoError(t, err)
	nop := func(context.Context, []nn.Named) error { return nil }
	assert.ErrorContains(t, m.RegisterCommHook(nil), "RegisterCommHook(nil)")
	require.NoError(t, m.RegisterCommHook(nop))
	assert.ErrorContains(t, m.RegisterCommHook(nop), "already has a hook")
	m.Close()
	closed, err := ddp.Wrap(ctx, lin)
	require.NoError(t, err)
	closed.Close()
	assert.ErrorContains(t, closed.RegisterCommHook(nop), "closed wrapper")
}
