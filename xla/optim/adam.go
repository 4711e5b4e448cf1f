package optim

import (
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// AdamConfig are torch.optim.Adam's (and AdamW's) arguments. Zero Beta1,
// Beta2 and Eps take torch's defaults 0.9, 0.999 and 1e-8.
type AdamConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
}

// Adam is torch.optim.Adam; with decoupled weight decay it is AdamW.
type Adam struct {
	base
	cfg       AdamConfig
	decoupled bool
	m, v      []*xla.Tensor
}

// NewAdam creates torch.optim.Adam (weight decay added to the gradient).
func NewAdam(params []*xla.Tensor, cfg AdamConfig) (*Adam, error) { return newAdam(params, cfg, false) }

// NewAdamW creates torch.optim.AdamW (weight decay applied to the weights).
func NewAdamW(params []*xla.Tensor, cfg AdamConfig) (*Adam, error) { return newAdam(params, cfg, true) }

func newAdam(params []*xla.Tensor, cfg AdamConfig, decoupled bool) (*Adam, error) {
	if cfg.Beta1 == 0 {
		cfg.Beta1 = 0.9
	}
	if cfg.Beta2 == 0 {
		cfg.Beta2 = 0.999
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-8
	}
	if cfg.Beta1 < 0 || cfg.Beta1 >= 1 || cfg.Beta2 < 0 || cfg.Beta2 >= 1 || cfg.WeightDecay < 0 {
		return nil, fmt.Errorf("optim: Adam betas (%g, %g) must be in [0, 1) and weight decay %g >= 0", cfg.Beta1, cfg.Beta2, cfg.WeightDecay)
	}
	b, err := newBase(params, cfg.LR)
	if err != nil {
		return nil, err
	}
	a := &Adam{base: b, cfg: cfg, decoupled: decoupled}
	if a.m, err = zerosLike(params); err != nil {
		return nil, err
	}
	if a.v, err = zerosLike(params); err != nil {
		return nil, err
	}
	return a, nil
}

// Step applies torch's Adam/AdamW update with bias correction.
func (a *Adam) Step() error {
	if err := a.checkLR(); err != nil {
		return err
	}
	d := a.step.Device()
	t := a.step.AddScalar(1)
	// Bias corrections 1-β^t in each parameter dtype: β is not exact in
	// float32, and float64 parameters must not lose precision to it.
	type corrections struct{ c1, c2 *xla.Tensor }
	byDType := map[xla.DType]corrections{}
	correctionsFor := func(dtype xla.DType) corrections {
		if c, ok := byDType[dtype]; ok {
			return c
		}
		td := t.Cast(dtype)
		c := corrections{
			c1: d.Ones(dtype).Sub(d.Full(a.cfg.Beta1, dtype).Pow(td)),
			c2: d.Ones(dtype).Sub(d.Full(a.cfg.Beta2, dtype).Pow(td)),
		}
		byDType[dtype] = c
		return c
	}
	for i, param := range a.params {
		if param.Grad() == nil {
			continue
		}
		p, g := opmath(param.Detach()), opmath(param.Grad())
		current := p
		if a.decoupled {
			current = p.Mul(a.lrFor(p).MulScalar(-a.cfg.WeightDecay).AddScalar(1))
		} else {
			g = weightDecayed(g, p, a.cfg.WeightDecay)
		}
		corr := correctionsFor(p.DType())
		c1, c2 := corr.c1, corr.c2
		m := opmath(a.m[i]).MulScalar(a.cfg.Beta1).Add(g.MulScalar(1 - a.cfg.Beta1))
		v := opmath(a.v[i]).MulScalar(a.cfg.Beta2).Add(g.Square().MulScalar(1 - a.cfg.Beta2))
		denom := v.Sqrt().Div(c2.Sqrt()).AddScalar(a.cfg.Eps)
		update := m.Div(denom).Div(c1).Mul(a.lrFor(p))
		if err := assignAll([2]*xla.Tensor{a.m[i], m}, [2]*xla.Tensor{a.v[i], v}, [2]*xla.Tensor{param, current.Sub(update)}); err != nil {
			return err
		}
	}
	return a.step.Assign(t)
}

// State returns the step count and both moment estimates.
func (a *Adam) State() []nn.Named {
	return append(append([]nn.Named{{Name: "step", Tensor: a.step}}, named("exp_avg", a.m)...), named("exp_avg_sq", a.v)...)
}

// Hyperparameters returns the settings.
func (a *Adam) Hyperparameters() map[string]float64 {
	return map[string]float64{"lr": a.lr, "beta1": a.cfg.Beta1, "beta2": a.cfg.Beta2, "eps": a.cfg.Eps, "weight_decay": a.cfg.WeightDecay}
}
