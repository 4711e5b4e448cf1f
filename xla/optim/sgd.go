package optim

import (
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// SGDConfig are torch.optim.SGD's arguments.
type SGDConfig struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
}

// SGD is torch.optim.SGD.
type SGD struct {
	base
	cfg     SGDConfig
	buffers []*xla.Tensor // momentum buffers; nil without momentum
}

// NewSGD creates the optimizer for params (all on one device).
func NewSGD(params []*xla.Tensor, cfg SGDConfig) (*SGD, error) {
	if cfg.Momentum < 0 || cfg.WeightDecay < 0 {
		return nil, fmt.Errorf("optim: SGD momentum %g and weight decay %g must be >= 0", cfg.Momentum, cfg.WeightDecay)
	}
	if cfg.Nesterov && (cfg.Momentum == 0 || cfg.Dampening != 0) {
		return nil, fmt.Errorf("optim: Nesterov momentum needs momentum > 0 and zero dampening")
	}
	b, err := newBase(params, cfg.LR)
	if err != nil {
		return nil, err
	}
	s := &SGD{base: b, cfg: cfg}
	if cfg.Momentum != 0 {
		if s.buffers, err = zerosLike(params); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Step applies torch's SGD update. torch starts the momentum buffer at the
// first gradient; with zero dampening that equals momentum·0 + gradient,
// otherwise the first step is selected in-graph.
func (s *SGD) Step() error {
	if err := s.checkLR(); err != nil {
		return err
	}
	first := s.step.Equal(s.step.Device().Zeros(xla.Float32))
	for i, param := range s.params {
		if param.Grad() == nil {
			continue
		}
		p, g := opmath(param.Detach()), opmath(param.Grad())
		g = weightDecayed(g, p, s.cfg.WeightDecay)
		if s.cfg.Momentum != 0 {
			buf := opmath(s.buffers[i]).MulScalar(s.cfg.Momentum).Add(g.MulScalar(1 - s.cfg.Dampening))
			if s.cfg.Dampening != 0 {
				buf = xla.Where(first, g, buf)
			}
			if err := assignAll([2]*xla.Tensor{s.buffers[i], buf}); err != nil {
				return err
			}
			if s.cfg.Nesterov {
				g = g.Add(buf.MulScalar(s.cfg.Momentum))
			} else {
				g = buf
			}
		}
		if err := assignAll([2]*xla.Tensor{param, p.Sub(g.Mul(s.lrFor(p)))}); err != nil {
			return err
		}
	}
	return s.step.Assign(s.step.AddScalar(1))
}

// State returns the step count and momentum buffers.
func (s *SGD) State() []nn.Named {
	return append([]nn.Named{{Name: "step", Tensor: s.step}}, named("momentum_buffer", s.buffers)...)
}

// Hyperparameters returns the settings.
func (s *SGD) Hyperparameters() map[string]float64 {
	nesterov := 0.0
	if s.cfg.Nesterov {
		nesterov = 1
	}
	return map[string]float64{"lr": s.lr, "momentum": s.cfg.Momentum, "dampening": s.cfg.Dampening,
		"weight_decay": s.cfg.WeightDecay, "nesterov": nesterov}
}
