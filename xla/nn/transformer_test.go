package nn

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/internal/reference"
)

func layerNormRef(x reference.Tensor, p []reference.Tensor) reference.Tensor {
	n := x.Dims[len(x.Dims)-1]
	out := reference.New(x.Dims...)
	for r := 0; r < len(x.V); r += n {
		var mean, sq float64
		for i := range n {
			mean += x.V[r+i]
		}
		mean /= float64(n)
		for i := range n {
			sq += (x.V[r+i] - mean) * (x.V[r+i] - mean)
		}
		inv := 1 / math.Sqrt(sq/float64(n)+1e-5)
		for i := range n {
			out.V[r+i] = (x.V[r+i]-mean)*inv*p[0].V[i] + p[1].V[i]
		}
	}
	return out
}

// attentionRef is torch's self-attention: x [B, T, E], params
// in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
func attentionRef(heads int, causal bool) func(x reference.Tensor, p []reference.Tensor) reference.Tensor {
	return func(x reference.Tensor, p []reference.Tensor) reference.Tensor {
		b, t, e := x.Dims[0], x.Dims[1], x.Dims[2]
		hd := e / heads
		qkv := linearRef(x, p[:2]) // [B, T, 3E]
		at := func(bi, ti, part, h, i int) float64 { return qkv.V[(bi*t+ti)*3*e+part*e+h*hd+i] }
		out := reference.New(b, t, e)
		for bi := range b {
			for h := range heads {
				for qi := range t {
					scores := reference.New(t)
					for ki := range t {
						if causal && ki > qi {
							scores.V[ki] = math.Inf(-1)
							continue
						}
						for i := range hd {
							scores.V[ki] += at(bi, qi, 0, h, i) * at(bi, ki, 1, h, i)
						}
						scores.V[ki] /= math.Sqrt(float64(hd))
					}
					w := reference.Softmax(scores, 0, false)
					for i := range hd {
						for ki := range t {
							out.V[(bi*t+qi)*e+h*hd+i] += w.V[ki] * at(bi, ki, 2, h, i)
						}
					}
				}
			}
		}
		return linearRef(out, p[2:])
	}
}

func geluRef(tanh bool) func(x reference.Tensor, _ []reference.Tensor) reference.Tensor {
	return func(x reference.Tensor, _ []reference.Tensor) reference.Tensor {
		return x.Map(func(v float64) float64 {
			if tanh {
				return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
			}
			return 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
		})
	}
}

func TestTransformerLayersAgainstFloat64Reference(t *testing.T) {
	for ci, tc := range []layerCase{
		{name: "LayerNorm", input: []int{2, 3, 5},
			build: func(d *xla.Device) (Module, error) {
				l, err := NewLayerNorm(d, 5, 0)
				if err == nil { // not the trivial 1 and 0, so their gradients show
					err = l.Weight.Assign(d.Arange(5, xla.Float32).MulScalar(0.25).AddScalar(0.5))
				}
				return l, err
			},
			reference: layerNormRef},
		{name: "GELU exact", input: []int{3, 4}, build: func(*xla.Device) (Module, error) { return GELU{}, nil }, reference: geluRef(false)},
		{name: "GELU tanh", input: []int{3, 4}, build: func(*xla.Device) (Module, error) { return GELU{Tanh: true}, nil }, reference: geluRef(true)},
		{name: "MultiheadAttention causal", input: []int{2, 4, 6},
			build: func(d *xla.Device) (Module, error) {
				m, err := NewMultiheadAttention(d, NewRand(7), 6, 2, 0, true)
				if err == nil {
					err = m.InProjBias.Assign(d.Arange(18, xla.Float32).MulScalar(0.05))
				}
				return m, err
			},
			reference: attentionRef(2, true)},
		{name: "MultiheadAttention unmasked", input: []int{1, 3, 4},
			build:     func(d *xla.Device) (Module, error) { return NewMultiheadAttention(d, NewRand(8), 4, 1, 0, false) },
			reference: attentionRef(1, false)},
	} {
		t.Run(tc.name, func(t *testing.T) { runLayerCase(t, tc, 100+ci) })
	}
}

// TestGPTParameters: the count GPTConfig.Parameters gives before
// building is the built model's.
func TestGPTParameters(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	for _, c := range []GPTConfig{{Vocab: 11, BlockSize: 8, Layers: 2, Heads: 2, Width: 16}, {Vocab: 65, BlockSize: 64, Layers: 4, Heads: 4, Width: 128}} {
		g, err := NewGPT(d, NewRand(1), c)
		require.NoError(t, err)
		assert.EqualValues(t, NumParameters(g), c.Parameters(), "%+v", c)
	}
}

// TestTransformerLayersRefuseBadInput: impossible sizes fail at
// construction, wrong inputs in the result, never a panic.
func TestTransformerLayersRefuseBadInput(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"embedding without rows", func() error { _, err := NewEmbedding(d, NewRand(1), 0, 4); return err }, "at least one row"},
		{"layer norm of size 0", func() error { _, err := NewLayerNorm(d, 0, 0); return err }, "positive size"},
		{"heads not dividing the width", func() error { _, err := NewMultiheadAttention(d, NewRand(1), 10, 3, 0, true); return err }, "multiple of the head count"},
		{"attention dropout 1", func() error { _, err := NewMultiheadAttention(d, NewRand(1), 4, 2, 1, true); return err }, "[0, 1)"},
		{"GPT with zero layers", func() error {
			_, err := NewGPT(d, NewRand(1), GPTConfig{Vocab: 5, BlockSize: 4, Heads: 1, Width: 4})
			return err
		}, "must be positive"},
		{"layer norm of the wrong width", func() error {
			l, err := NewLayerNorm(d, 4, 0)
			require.NoError(t, err)
			return l.Forward(d.Zeros(xla.Float32, 2, 3)).Err()
		}, "the last axis must be 4"},
		{"attention of a matrix", func() error {
			m, err := NewMultiheadAttention(d, NewRand(1), 4, 2, 0, true)
			require.NoError(t, err)
			return m.Forward(d.Zeros(xla.Float32, 3, 4)).Err()
		}, "needs [batch, time, 4]"},
		{"causal attention of a vector", func() error {
			m, err := NewMultiheadAttention(d, NewRand(1), 4, 2, 0, true)
			require.NoError(t, err)
			return m.Forward(d.Zeros(xla.Float32, 4)).Err()
		}, "needs [batch, time, 4]"},
		{"attention with a float mask", func() error {
			m, err := NewMultiheadAttention(d, NewRand(1), 4, 2, 0, false)
			require.NoError(t, err)
			return m.Attend(d.Zeros(xla.Float32, 1, 3, 4), d.Zeros(xla.Float32, 3, 3)).Err()
		}, "want Bool"},
		{"GPT past its block size", func() error {
			g, err := NewGPT(d, NewRand(1), GPTConfig{Vocab: 5, BlockSize: 4, Layers: 1, Heads: 1, Width: 4})
			require.NoError(t, err)
			return g.Forward(d.Zeros(xla.Int32, 2, 5)).Err()
		}, "1 <= time <= block size 4"},
		{"GPT of float ids", func() error {
			g, err := NewGPT(d, NewRand(1), GPTConfig{Vocab: 5, BlockSize: 4, Layers: 1, Heads: 1, Width: 4})
			require.NoError(t, err)
			return g.Forward(d.Zeros(xla.Float32, 2, 3)).Err()
		}, "want Int32 or Int64"},
		{"GPT larger than any device", func() error {
			_, err := NewGPT(d, NewRand(1), GPTConfig{Vocab: 5, BlockSize: 4, Layers: 100_000_000, Heads: 1, Width: 4096})
			return err
		}, "more than any device holds"},
		{"integer compute dtype", func() error { return SetComputeDType(NewSequential(), xla.Int32) }, "must be a float type"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.ErrorContains(t, tc.err(), tc.want) })
	}
}
