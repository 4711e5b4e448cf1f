package optim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// oneStepReference is torch's first step of each optimizer in float64,
// written from torch's documented update rules (independent of our code).
var oneStepReference = map[string]func(p, g float64) float64{
	"SGD": func(p, g float64) float64 { // lr 0.5, momentum 0.9, weight decay 0.1: buf = g + wd·p on step 1
		return p - 0.5*(g+0.1*p)
	},
	"Adam": func(p, g float64) float64 { // lr 0.25, betas (0.9, 0.999), eps 1e-8, weight decay 0.1
		g += 0.1 * p
		m, v := 0.1*g, 0.001*g*g
		return p - 0.25*(m/0.1)/(math.Sqrt(v/0.001)+1e-8)
	},
	"AdamW": func(p, g float64) float64 { // as Adam, decoupled weight decay 0.1
		p *= 1 - 0.25*0.1
		m, v := 0.1*g, 0.001*g*g
		return p - 0.25*(m/0.1)/(math.Sqrt(v/0.001)+1e-8)
	},
	"Adadelta": func(p, g float64) float64 { // lr 100, rho 0.9, eps 1e-6
		std := math.Sqrt(0.1*g*g + 1e-6)
		return p - 100*math.Sqrt(1e-6)/std*g
	},
}

func newOptimizer(name string, params []*xla.Tensor) (Optimizer, error) {
	switch name {
	case "SGD":
		return NewSGD(params, SGDConfig{LR: 0.5, Momentum: 0.9, WeightDecay: 0.1})
	case "Adam":
		return NewAdam(params, AdamConfig{LR: 0.25, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1})
	case "AdamW":
		return NewAdamW(params, AdamConfig{LR: 0.25, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1})
	case "Adadelta":
		return NewAdadelta(params, AdadeltaConfig{LR: 100, Rho: 0.9, Eps: 1e-6})
	}
	panic(name)
}

// TestOneStepInEveryFloatDType: each optimizer takes one step on float32,
// float64 and bfloat16 parameters (bf16 is Trainium's native type; its
// scalar ops used to panic, so no bf16 model trained), matching float64
// references within the dtype's precision, relative to max(1, |want|):
// bf16 1/64 (8 significant bits, a few roundings), f32 1e-5, f64 1e-12.
// Optimizer state keeps the parameter's dtype.
func TestOneStepInEveryFloatDType(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	d := e.Device(0)
	ctx := xlatest.Context(t)
	p0 := []float32{0.5, -1.25, 2, 0.75}
	g0 := []float32{0.25, -0.5, 1, 2}
	tolerances := map[xla.DType]float64{xla.BFloat16: 1.0 / 64, xla.Float32: 1e-5, xla.Float64: 1e-12}
	for _, dt := range []xla.DType{xla.Float32, xla.Float64, xla.BFloat16} {
		for _, name := range []string{"SGD", "Adam", "AdamW", "Adadelta"} {
			t.Run(dt.String()+"/"+name, func(t *testing.T) {
				base, err := xla.FromSlice(d, p0, 4)
				require.NoError(t, err)
				grads, err := xla.FromSlice(d, g0, 4)
				require.NoError(t, err)
				p := base.Cast(dt)
				require.NoError(t, d.MarkStep(ctx))
				require.NoError(t, p.SetRequiresGrad(true))
				opt, err := newOptimizer(name, []*xla.Tensor{p})
				require.NoError(t, err)
				require.NoError(t, p.Mul(grads.Cast(dt)).Sum().Backward())
				require.NoError(t, opt.Step())
				require.NoError(t, d.MarkStep(ctx))
				assert.Equal(t, dt, p.DType())
				for _, s := range opt.State() {
					if s.Tensor.Rank() > 0 {
						assert.Equal(t, dt, s.Tensor.DType(), "state %s", s.Name)
					}
				}
				got, err := xla.Values[float64](ctx, p.Cast(xla.Float64))
				require.NoError(t, err)
				for i := range p0 {
					want := oneStepReference[name](float64(p0[i]), float64(g0[i]))
					assert.InDelta(t, want, got[i], tolerances[dt]*math.Max(1, math.Abs(want)), "element %d", i)
				}
			})
		}
	}
}
