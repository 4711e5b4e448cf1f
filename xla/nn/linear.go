package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// Linear is y = x Wᵀ + b with W of shape [out, in], as torch.nn.Linear.
type Linear struct {
	Weight, Bias *xla.Tensor // Bias is nil without bias
	// err is why Dense could not build the layer.
	err error
	precision
}

// NewLinear creates a Linear layer on d with torch's default init.
func NewLinear(d *xla.Device, rng *rand.Rand, in, out int, bias bool) (*Linear, error) {
	if in < 0 || out < 0 {
		return nil, fmt.Errorf("nn: Linear(%d, %d): the feature counts cannot be negative", in, out)
	}
	b := &builder{dev: d, rng: rng}
	l := &Linear{Weight: b.param(b.uniform(defaultBound(in), out, in), out, in)}
	if bias {
		l.Bias = b.param(b.uniform(defaultBound(in), out), out)
	}
	return l, b.err
}

// Dense is NewLinear with a bias, for a model built in one expression:
// a failure stays in the layer (Err), Wrap and the optimizers refuse the
// model with it, and Forward returns it in its result.
func Dense(d *xla.Device, rng *rand.Rand, in, out int) *Linear {
	l, err := NewLinear(d, rng, in, out, true)
	if err != nil {
		return &Linear{err: fmt.Errorf("nn: Dense(%d, %d): %w", in, out, err)}
	}
	return l
}

// Err is why the layer could not be built (Dense), or nil.
func (l *Linear) Err() error { return l.err }

// Forward applies the layer to x [..., in].
func (l *Linear) Forward(x *xla.Tensor) *xla.Tensor {
	if l.err != nil {
		return x.Fail(l.err)
	}
	y := l.cast(x).MatMul(l.cast(l.Weight).T())
	if l.Bias != nil {
		y = y.Add(l.cast(l.Bias))
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
