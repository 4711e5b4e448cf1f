package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// MultiheadAttention is torch.nn.MultiheadAttention(batch_first=True)
// used as self-attention: one packed input projection (in_proj_weight
// [3E, E], in_proj_bias [3E]), Heads heads of E/Heads values, dropout on
// the attention weights in training, and out_proj. Causal makes Forward
// mask the future, as is_causal with torch's triangular mask.
type MultiheadAttention struct {
	InProjWeight, InProjBias *xla.Tensor
	OutProj                  *Linear
	Heads                    int
	Causal                   bool
	drop                     *Dropout
	precision
}

// NewMultiheadAttention creates the layer with torch's init: a Xavier
// uniform input projection, zero biases, a default Linear out_proj.
func NewMultiheadAttention(d *xla.Device, rng *rand.Rand, embed, heads int, dropout float64, causal bool) (*MultiheadAttention, error) {
	if embed < 1 || heads < 1 || embed%heads != 0 {
		return nil, fmt.Errorf("nn: MultiheadAttention(embed %d, heads %d): the width must be a positive multiple of the head count", embed, heads)
	}
	drop, err := NewDropout(dropout)
	if err != nil {
		return nil, fmt.Errorf("nn: MultiheadAttention: %w", err)
	}
	b := &builder{dev: d, rng: rng}
	m := &MultiheadAttention{Heads: heads, Causal: causal, drop: drop}
	m.InProjWeight = b.param(b.uniform(math.Sqrt(6/float64(embed+3*embed)), 3*embed, embed), 3*embed, embed)
	m.InProjBias = b.param(b.filled(0, 3*embed), 3*embed)
	if b.err != nil {
		return nil, b.err
	}
	if m.OutProj, err = NewLinear(d, rng, embed, embed, true); err != nil {
		return nil, err
	}
	if err := m.OutProj.Bias.Assign(d.Zeros(m.OutProj.Bias.DType(), embed)); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *MultiheadAttention) setTraining(on bool) { m.drop.setTraining(on) }

// Forward is self-attention over x [B, T, E], causal if m.Causal.
func (m *MultiheadAttention) Forward(x *xla.Tensor) *xla.Tensor {
	if x.Err() != nil || !m.Causal || x.Rank() < 2 {
		return m.attend(x, nil)
	}
	t := x.Dims()[1]
	d := x.Device()
	return m.attend(x, d.Ones(xla.Float32, t, t).Tril(0).Greater(d.Zeros(xla.Float32)))
}

// Attend is self-attention over x [B, T, E] with torch's boolean
// attn_mask: true where a query may NOT attend a key, shaped [T, T] or
// broadcastable to [B, Heads, T, T]; nil attends everywhere. A query
// that may attend nothing gets NaN, as in torch.
func (m *MultiheadAttention) Attend(x, mask *xla.Tensor) *xla.Tensor {
	if x.Err() != nil || mask == nil || mask.Err() != nil {
		return m.attend(x, mask)
	}
	if mask.DType() != xla.Bool {
		return xla.Failed(x, fmt.Errorf("nn: MultiheadAttention: the mask is %s, want Bool (true = may not attend)", mask.Shape()))
	}
	return m.attend(x, mask.Equal(x.Device().Zeros(xla.Bool)))
}

// attend is self-attention over x [B, T, E] where keep (Bool, nil for
// everywhere) holds.
func (m *MultiheadAttention) attend(x, keep *xla.Tensor) *xla.Tensor {
	if x.Err() != nil {
		return x
	}
	e := m.InProjWeight.Dims()[1]
	if x.Rank() != 3 || x.Dims()[2] != e {
		return xla.Failed(x, fmt.Errorf("nn: MultiheadAttention(embed %d) of %s: needs [batch, time, %d]", e, x.Shape(), e))
	}
	bsz, t, h := x.Dims()[0], x.Dims()[1], m.Heads
	hd := e / h
	qkv := m.cast(x).MatMul(m.cast(m.InProjWeight).T()).Add(m.cast(m.InProjBias))
	heads := func(i int) *xla.Tensor {
		return qkv.Narrow(2, i*e, e).Reshape(bsz, t, h, hd).Permute(0, 2, 1, 3)
	}
	q, k, v := heads(0), heads(1), heads(2)
	scores := q.MulScalar(1 / math.Sqrt(float64(hd))).MatMul(k.Permute(0, 1, 3, 2))
	// Softmax in float32 whatever the compute dtype, as autocast runs it.
	scores = scores.Cast(xla.OpMathDType(scores.DType()))
	var weights *xla.Tensor
	if keep == nil {
		weights = scores.Softmax(-1)
	} else {
		weights = scores.MaskedSoftmax(keep, -1)
	}
	weights = m.drop.Forward(weights).Cast(v.DType())
	out := weights.MatMul(v).Permute(0, 2, 1, 3).Reshape(bsz, t, e)
	return m.OutProj.Forward(out)
}

// Params returns the packed input projection.
func (m *MultiheadAttention) Params() []Named {
	return []Named{{"in_proj_weight", m.InProjWeight}, {"in_proj_bias", m.InProjBias}}
}

// Buffers returns none.
func (m *MultiheadAttention) Buffers() []Named { return nil }

// Children returns out_proj.
func (m *MultiheadAttention) Children() []NamedModule {
	return []NamedModule{{"out_proj", m.OutProj}}
}
