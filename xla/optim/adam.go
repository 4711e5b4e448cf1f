package optim

import (
	"fmt"
	"math"

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
	// decay is each parameter's weight decay: cfg.WeightDecay, or its
	// group's.
	decay []float64
}

// ParamGroup is a set of parameters with its own weight decay, a torch
// param_group ({"params": ..., "weight_decay": ...}).
type ParamGroup struct {
	Params      []*xla.Tensor
	WeightDecay float64
}

// DecayGroups splits named parameters as nanoGPT and Hugging Face do for
// AdamW: matrices and embeddings (2 or more dimensions) decay by
// weightDecay, biases and norm weights (1 dimension or scalars) do not.
// Either group may be empty.
func DecayGroups(named []nn.Named, weightDecay float64) []ParamGroup {
	decay, keep := ParamGroup{WeightDecay: weightDecay}, ParamGroup{}
	for _, p := range named {
		if p.Tensor != nil && p.Tensor.Rank() >= 2 {
			decay.Params = append(decay.Params, p.Tensor)
		} else {
			keep.Params = append(keep.Params, p.Tensor)
		}
	}
	return []ParamGroup{decay, keep}
}

// NewAdamWGroups creates torch.optim.AdamW over parameter groups, each
// with its own weight decay (cfg.WeightDecay is ignored); the state is
// numbered across the groups in order, as torch numbers it.
func NewAdamWGroups(groups []ParamGroup, cfg AdamConfig) (*Adam, error) {
	var params []*xla.Tensor
	var decay []float64
	seen := map[*xla.Tensor]int{}
	for gi, g := range groups {
		if g.WeightDecay < 0 || math.IsNaN(g.WeightDecay) {
			return nil, fmt.Errorf("optim: AdamW group %d: weight decay %g must be >= 0", gi, g.WeightDecay)
		}
		for _, p := range g.Params {
			if other, dup := seen[p]; dup && p != nil {
				return nil, fmt.Errorf("optim: AdamW: a parameter is in groups %d and %d: torch refuses this too", other, gi)
			}
			seen[p] = gi
			params = append(params, p)
			decay = append(decay, g.WeightDecay)
		}
	}
	cfg.WeightDecay = 0
	a, err := newAdam(params, cfg, true)
	if err != nil {
		return nil, err
	}
	a.decay = decay
	return a, nil
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
	a := &Adam{base: b, cfg: cfg, decoupled: decoupled, decay: make([]float64, len(params))}
	for i := range a.decay {
		a.decay[i] = cfg.WeightDecay
	}
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
		switch {
		case a.decoupled && a.decay[i] != 0:
			current = p.Mul(a.lrFor(p).MulScalar(-a.decay[i]).AddScalar(1))
		case !a.decoupled:
			g = weightDecayed(g, p, a.decay[i])
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
