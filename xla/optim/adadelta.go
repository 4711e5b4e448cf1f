package optim

import (
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// AdadeltaConfig are torch.optim.Adadelta's arguments. Zero LR, Rho and Eps
// take torch's defaults 1.0, 0.9 and 1e-6.
type AdadeltaConfig struct {
	LR, Rho, Eps, WeightDecay float64
}

// Adadelta is torch.optim.Adadelta (the smddp MNIST example's optimizer).
type Adadelta struct {
	base
	cfg                 AdadeltaConfig
	squareAvg, accDelta []*xla.Tensor
}

// NewAdadelta creates the optimizer.
func NewAdadelta(params []*xla.Tensor, cfg AdadeltaConfig) (*Adadelta, error) {
	if cfg.LR == 0 {
		cfg.LR = 1
	}
	if cfg.Rho == 0 {
		cfg.Rho = 0.9
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-6
	}
	if cfg.Rho < 0 || cfg.Rho > 1 || cfg.WeightDecay < 0 {
		return nil, fmt.Errorf("optim: Adadelta rho %g must be in [0, 1] and weight decay %g >= 0", cfg.Rho, cfg.WeightDecay)
	}
	b, err := newBase(params, cfg.LR)
	if err != nil {
		return nil, err
	}
	a := &Adadelta{base: b, cfg: cfg}
	if a.squareAvg, err = zerosLike(params); err != nil {
		return nil, err
	}
	if a.accDelta, err = zerosLike(params); err != nil {
		return nil, err
	}
	return a, nil
}

// Step applies torch's Adadelta update.
func (a *Adadelta) Step() error {
	if err := a.checkLR(); err != nil {
		return err
	}
	rho := a.cfg.Rho
	for i, param := range a.params {
		if param.Grad() == nil {
			continue
		}
		p, g := opmath(param.Detach()), opmath(param.Grad())
		g = weightDecayed(g, p, a.cfg.WeightDecay)
		accDelta := opmath(a.accDelta[i])
		sq := opmath(a.squareAvg[i]).MulScalar(rho).Add(g.Square().MulScalar(1 - rho))
		delta := accDelta.AddScalar(a.cfg.Eps).Sqrt().Div(sq.AddScalar(a.cfg.Eps).Sqrt()).Mul(g)
		acc := accDelta.MulScalar(rho).Add(delta.Square().MulScalar(1 - rho))
		if err := assignAll([2]*xla.Tensor{a.squareAvg[i], sq}, [2]*xla.Tensor{a.accDelta[i], acc},
			[2]*xla.Tensor{param, p.Sub(delta.Mul(a.lrFor(p)))}); err != nil {
			return err
		}
	}
	return a.step.Assign(a.step.AddScalar(1))
}

// State returns the step count and both running averages.
func (a *Adadelta) State() []nn.Named {
	return append(append([]nn.Named{{Name: "step", Tensor: a.step}}, named("square_avg", a.squareAvg)...), named("acc_delta", a.accDelta)...)
}

// Hyperparameters returns the settings.
func (a *Adadelta) Hyperparameters() map[string]float64 {
	return map[string]float64{"lr": a.lr, "rho": a.cfg.Rho, "eps": a.cfg.Eps, "weight_decay": a.cfg.WeightDecay}
}
