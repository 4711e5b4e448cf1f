package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// Embedding is torch.nn.Embedding: a table Weight [Num, Dim] whose rows
// integer ids select. Its gradient is a scatter-add into the rows used.
// Ids outside [0, Num) are clamped (the device cannot raise).
type Embedding struct {
	Weight *xla.Tensor
}

// NewEmbedding creates a table of num rows of dim values, N(0, 1) as torch.
func NewEmbedding(d *xla.Device, rng *rand.Rand, num, dim int) (*Embedding, error) {
	if num < 1 || dim < 1 {
		return nil, fmt.Errorf("nn: Embedding(%d, %d): needs at least one row of at least one value", num, dim)
	}
	b := &builder{dev: d, rng: rng}
	e := &Embedding{Weight: b.param(b.normal(1, num, dim), num, dim)}
	return e, b.err
}

// Forward returns the rows of ids (Int32 or Int64, any shape) as
// ids.Dims() + [Dim].
func (e *Embedding) Forward(ids *xla.Tensor) *xla.Tensor {
	if ids.Err() != nil {
		return ids
	}
	dims := append(ids.Dims(), e.Weight.Dims()[1])
	return e.Weight.IndexSelect(0, ids.Reshape(-1)).Reshape(dims...)
}

// Params returns the table.
func (e *Embedding) Params() []Named { return []Named{{"weight", e.Weight}} }

// Buffers returns none.
func (e *Embedding) Buffers() []Named { return nil }

// Children returns none.
func (e *Embedding) Children() []NamedModule { return nil }

// LayerNorm is torch.nn.LayerNorm over the last axis, with elementwise
// Weight and Bias. It computes in float32 (float64 for float64 inputs)
// whatever the compute dtype, and returns its parameters' dtype.
type LayerNorm struct {
	Weight, Bias *xla.Tensor
	Eps          float64
}

// NewLayerNorm normalizes the last axis of size dim; eps 0 means torch's 1e-5.
func NewLayerNorm(d *xla.Device, dim int, eps float64) (*LayerNorm, error) {
	if dim < 1 || eps < 0 {
		return nil, fmt.Errorf("nn: LayerNorm(%d, eps %g): needs a positive size and eps >= 0", dim, eps)
	}
	if eps == 0 {
		eps = 1e-5
	}
	b := &builder{dev: d}
	l := &LayerNorm{Weight: b.param(b.filled(1, dim), dim), Bias: b.param(b.filled(0, dim), dim), Eps: eps}
	return l, b.err
}

// Forward normalizes x [..., dim] with the biased variance, as torch.
func (l *LayerNorm) Forward(x *xla.Tensor) *xla.Tensor {
	if x.Err() != nil {
		return x
	}
	if x.Rank() < 1 || x.Dims()[x.Rank()-1] != l.Weight.Dims()[0] {
		return xla.Failed(x, fmt.Errorf("nn: LayerNorm(%d) of %s: the last axis must be %d", l.Weight.Dims()[0], x.Shape(), l.Weight.Dims()[0]))
	}
	x = x.Cast(l.Weight.DType())
	kept := append(x.Dims()[:x.Rank()-1], 1)
	centered := x.Sub(x.Mean(-1).Reshape(kept...))
	variance := centered.Square().Mean(-1).Reshape(kept...)
	return centered.Div(variance.AddScalar(l.Eps).Sqrt()).Mul(l.Weight).Add(l.Bias)
}

// Params returns weight and bias.
func (l *LayerNorm) Params() []Named { return []Named{{"weight", l.Weight}, {"bias", l.Bias}} }

// Buffers returns none.
func (l *LayerNorm) Buffers() []Named { return nil }

// Children returns none.
func (l *LayerNorm) Children() []NamedModule { return nil }

// GELU is torch.nn.GELU: x·Φ(x) exactly (erf), or with Tanh its tanh
// approximation (approximate="tanh", GPT-2's).
type GELU struct {
	stateless
	Tanh bool
}

// Forward applies GELU in x's dtype.
func (g GELU) Forward(x *xla.Tensor) *xla.Tensor {
	if g.Tanh {
		inner := x.Add(x.Square().Mul(x).MulScalar(0.044715)).MulScalar(math.Sqrt(2 / math.Pi)).Tanh()
		return x.Mul(inner.AddScalar(1)).MulScalar(0.5)
	}
	return x.Mul(x.MulScalar(1 / math.Sqrt2).Erf().AddScalar(1)).MulScalar(0.5)
}
