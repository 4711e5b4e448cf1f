package nn

import (
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// Linear is y = x Wᵀ + b with W of shape [out, in], as torch.nn.Linear.
type Linear struct {
	Weight, Bias *xla.Tensor // Bias is nil without bias
}

// NewLinear creates a Linear layer on d with torch's default init.
func NewLinear(d *xla.Device, rng *rand.Rand, in, out int, bias bool) (*Linear, error) {
	b := &builder{dev: d, rng: rng}
	l := &Linear{Weight: b.param(b.uniform(defaultBound(in), out, in), out, in)}
	if bias {
		l.Bias = b.param(b.uniform(defaultBound(in), out), out)
	}
	return l, b.err
}

// Forward applies the layer to x [..., in].
func (l *Linear) Forward(x *xla.Tensor) *xla.Tensor {
	y := x.MatMul(l.Weight.T())
	if l.Bias != nil {
		y = y.Add(l.Bias)
	}
	return y
}

// Params returns weight and bias.
func (l *Linear) Params() []Named {
	ps := []Named{{"weight", l.Weight}}
	if l.Bias != nil {
		ps = append(ps, Named{"bias", l.Bias})
	}
	return ps
}

// Buffers returns none.
func (l *Linear) Buffers() []Named { return nil }

// Children returns none.
func (l *Linear) Children() []NamedModule { return nil }
