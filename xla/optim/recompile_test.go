package optim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

// TestSchedulerChangesNeverRecompile: the learning rate is a program input
// whatever its value, so a schedule through 1.0, 0.7, 0.49 (the
// smdistributed seed: Adadelta lr 1.0 + StepLR(1, 0.7)) and through the
// special values 0 and 1 compiles the step once. An epoch at lr 0 must
// leave the parameters as they were (the input is really used).
func TestSchedulerChangesNeverRecompile(t *testing.T) {
	for _, name := range []string{"SGD", "Adam", "AdamW", "Adadelta"} {
		t.Run(name, func(t *testing.T) {
			d := newDevice(t)
			ctx := context.Background()
			p, err := xla.FromSlice(d, []float32{1, -2, 3}, 3)
			require.NoError(t, err)
			require.NoError(t, p.SetRequiresGrad(true))
			opt, err := newOptimizer(name, []*xla.Tensor{p})
			require.NoError(t, err)
			opt.SetLR(1.0)
			sched, err := NewStepLR(opt, 1, 0.7)
			require.NoError(t, err)
			xla.ResetMetrics()
			step := func() []float32 {
				opt.ZeroGrad()
				require.NoError(t, p.Square().Sum().Backward())
				require.NoError(t, opt.Step())
				require.NoError(t, d.MarkStep(ctx))
				got, err := p.Float32s(ctx)
				require.NoError(t, err)
				return got
			}
			for epoch := range 3 {
				for range 2 {
					step()
				}
				sched.Step()
				assert.InDelta(t, pow(0.7, epoch+1), opt.LR(), 1e-12)
			}
			opt.SetLR(0)
			before, err := p.Float32s(ctx)
			require.NoError(t, err)
			assert.Equal(t, before, step(), "an lr-0 step changes nothing")
			opt.SetLR(1)
			assert.NotEqual(t, before, step(), "an lr-1 step moves the parameters")
			assert.EqualValues(t, 1, xla.GetMetrics().Compilations, "lr 1, 0.7, 0.49, 0.343, 0, 1: one program")
		})
	}
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}

// TestSetLRReachesACompiledStep: a compiled step does not rerun Step's Go
// code, so the learning rate must come from the device; a schedule run
// through xla.Compile gives bit-identical parameters to the lazy run, with
// one trace.
func TestSetLRReachesACompiledStep(t *testing.T) {
	schedule := []float64{1, 0.7, 0, 0.49, 1}
	for _, name := range []string{"SGD", "Adam", "AdamW", "Adadelta"} {
		t.Run(name, func(t *testing.T) {
			d := newDevice(t)
			ctx := context.Background()
			run := func(compiled bool) [][]float32 {
				p, err := xla.FromSlice(d, []float32{1, -2, 3}, 3)
				require.NoError(t, err)
				require.NoError(t, p.SetRequiresGrad(true))
				opt, err := newOptimizer(name, []*xla.Tensor{p})
				require.NoError(t, err)
				fn := func(...*xla.Tensor) ([]*xla.Tensor, error) {
					opt.ZeroGrad()
					if err := p.Square().Sum().Backward(); err != nil {
						return nil, err
					}
					return nil, opt.Step()
				}
				step := xla.Compile(fn)
				xla.ResetMetrics()
				var got [][]float32
				for _, lr := range schedule {
					opt.SetLR(lr)
					if compiled {
						_, err = step.Run(ctx, d)
					} else {
						_, err = fn()
						if err == nil {
							err = d.MarkStep(ctx)
						}
					}
					require.NoError(t, err)
					vs, err := p.Float32s(ctx)
					require.NoError(t, err)
					got = append(got, vs)
				}
				if compiled {
					assert.EqualValues(t, 1, xla.GetMetrics().StepTraces)
				}
				return got
			}
			lazy := run(false)
			assert.Equal(t, lazy, run(true))
			assert.Equal(t, lazy[1], lazy[2], "the lr-0 step changes nothing")
		})
	}
}
