package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/xladdp/xladdp/xla"
)

// Block is a pre-LN transformer block (GPT-2's):
// x + attn(ln_1(x)), then + mlp(ln_2(x)), where mlp is Linear(E, 4E),
// GELU, Linear(4E, E), Dropout. The residual stream keeps x's dtype under
// a bf16 compute policy: each branch's output is cast back before the add.
type Block struct {
	LN1  *LayerNorm
	Attn *MultiheadAttention
	LN2  *LayerNorm
	MLP  *Sequential
}

// NewBlock creates a causal block of width embed.
func NewBlock(d *xla.Device, rng *rand.Rand, embed, heads int, dropout float64, tanhGELU bool) (*Block, error) {
	var b Block
	var err error
	if b.LN1, err = NewLayerNorm(d, embed, 0); err != nil {
		return nil, err
	}
	if b.Attn, err = NewMultiheadAttention(d, rng, embed, heads, dropout, true); err != nil {
		return nil, err
	}
	if b.LN2, err = NewLayerNorm(d, embed, 0); err != nil {
		return nil, err
	}
	fc, err := NewLinear(d, rng, embed, 4*embed, true)
	if err != nil {
		return nil, err
	}
	proj, err := NewLinear(d, rng, 4*embed, embed, true)
	if err != nil {
		return nil, err
	}
	drop, err := NewDropout(dropout)
	if err != nil {
		return nil, err
	}
	b.MLP = NewSequential(fc, GELU{Tanh: tanhGELU}, proj, drop)
	return &b, nil
}

// Forward applies the block to x [B, T, E].
func (b *Block) Forward(x *xla.Tensor) *xla.Tensor {
	x = x.Add(b.Attn.Forward(b.LN1.Forward(x)).Cast(x.DType()))
	return x.Add(b.MLP.Forward(b.LN2.Forward(x)).Cast(x.DType()))
}

// Params returns none (the children own them).
func (b *Block) Params() []Named { return nil }

// Buffers returns none.
func (b *Block) Buffers() []Named { return nil }

// Children returns ln_1, attn, ln_2, mlp.
func (b *Block) Children() []NamedModule {
	return []NamedModule{{"ln_1", b.LN1}, {"attn", b.Attn}, {"ln_2", b.LN2}, {"mlp", b.MLP}}
}

// GPTConfig is a decoder-only transformer's shape. nanoGPT's
// shakespeare_char is {Vocab: 65, BlockSize: 256, Layers: 6, Heads: 6,
// Width: 384, Dropout: 0.2}.
type GPTConfig struct {
	Vocab, BlockSize, Layers, Heads, Width int
	Dropout                                float64
	// TanhGELU uses GELU's tanh approximation (GPT-2's) instead of erf.
	TanhGELU bool
}

func (c GPTConfig) check() error {
	if c.Vocab < 1 || c.BlockSize < 1 || c.Layers < 1 || c.Heads < 1 || c.Width < 1 || c.Width%c.Heads != 0 {
		return fmt.Errorf("nn: GPT %+v: vocabulary, block size, layers, heads and width must be positive, the width a multiple of the heads", c)
	}
	if p := c.Parameters(); p > xla.MaxTensorBytes/4 {
		return fmt.Errorf("nn: GPT %+v has %.3g parameters, more than any device holds (xla.MaxTensorBytes)", c, p)
	}
	return nil
}

// Parameters counts the model's parameters (the tied head once), in
// float64 so that no configuration overflows: per block 12·W² + 13·W
// (attention 4·W² + 4·W, MLP 8·W² + 5·W, two norms 4·W), the embeddings
// (Vocab + BlockSize)·W and the final norm 2·W.
func (c GPTConfig) Parameters() float64 {
	w := float64(c.Width)
	return float64(c.Layers)*(12*w*w+13*w) + float64(c.Vocab+c.BlockSize)*w + 2*w
}

// GPT is a character- or token-level decoder: token and learned position
// embeddings, Layers pre-LN causal blocks, a final LayerNorm and an
// output head tied to the token embedding (one tensor, listed once by
// NamedParameters and under both names by StateDict, as torch).
type GPT struct {
	Config         GPTConfig
	TokEmb, PosEmb *Embedding
	Drop           *Dropout
	Blocks         *Sequential
	LNF            *LayerNorm
	Head           *Linear
}

// NewGPT builds the model with GPT-2's init: N(0, 0.02) weights and
// embeddings, zero biases, and the residual projections (attention
// out_proj, the MLP's second Linear) scaled by 1/sqrt(2·Layers).
func NewGPT(d *xla.Device, rng *rand.Rand, cfg GPTConfig) (*GPT, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	g := &GPT{Config: cfg}
	var err error
	if g.TokEmb, err = NewEmbedding(d, rng, cfg.Vocab, cfg.Width); err != nil {
		return nil, err
	}
	if g.PosEmb, err = NewEmbedding(d, rng, cfg.BlockSize, cfg.Width); err != nil {
		return nil, err
	}
	if g.Drop, err = NewDropout(cfg.Dropout); err != nil {
		return nil, err
	}
	blocks := make([]Module, cfg.Layers)
	for i := range blocks {
		if blocks[i], err = NewBlock(d, rng, cfg.Width, cfg.Heads, cfg.Dropout, cfg.TanhGELU); err != nil {
			return nil, err
		}
	}
	g.Blocks = NewSequential(blocks...)
	if g.LNF, err = NewLayerNorm(d, cfg.Width, 0); err != nil {
		return nil, err
	}
	g.Head = &Linear{Weight: g.TokEmb.Weight}
	return g, g.initGPT2(d, rng)
}

// initGPT2 redraws every parameter as GPT-2 initialises it.
func (g *GPT) initGPT2(d *xla.Device, rng *rand.Rand) error {
	b := &builder{dev: d, rng: rng}
	residualStd := 0.02 / math.Sqrt(2*float64(g.Config.Layers))
	for _, p := range NamedParameters(g) {
		dims := p.Tensor.Dims()
		var values []float32
		switch {
		case len(dims) == 1 && strings.HasSuffix(p.Name, "bias"): // .bias, attention's in_proj_bias
			values = make([]float32, dims[0]) // Linear drew U(±1/√fan_in)
		case len(dims) == 1:
			continue // norm weights stay 1
		case isResidualProjection(p.Name):
			values = b.normal(residualStd, dims...)
		default:
			values = b.normal(0.02, dims...)
		}
		if t := b.upload(values, dims...); t != nil {
			if err := p.Tensor.Assign(t); err != nil {
				return err
			}
		}
	}
	return b.err
}

// isResidualProjection reports a block's attn.out_proj or second MLP weight.
func isResidualProjection(name string) bool {
	return strings.HasPrefix(name, "blocks.") &&
		(strings.HasSuffix(name, ".attn.out_proj.weight") || strings.HasSuffix(name, ".mlp.2.weight"))
}

// Forward maps token ids [B, T] (T <= BlockSize) to logits [B, T, Vocab].
func (g *GPT) Forward(ids *xla.Tensor) *xla.Tensor {
	if ids.Err() != nil {
		return ids
	}
	if ids.Rank() != 2 || ids.Dims()[1] > g.Config.BlockSize || ids.Dims()[1] < 1 {
		return xla.Failed(ids, fmt.Errorf("nn: GPT of ids %s: needs [batch, time] with 1 <= time <= block size %d", ids.Shape(), g.Config.BlockSize))
	}
	positions := ids.Device().Arange(ids.Dims()[1], ids.DType())
	x := g.TokEmb.Forward(ids).Add(g.PosEmb.Forward(positions))
	x = g.LNF.Forward(g.Blocks.Forward(g.Drop.Forward(x)))
	return g.Head.Forward(x)
}

// Params returns none (the children own them).
func (g *GPT) Params() []Named { return nil }

// Buffers returns none.
func (g *GPT) Buffers() []Named { return nil }

// Children returns tok_emb, pos_emb, blocks, ln_f and head (tied).
func (g *GPT) Children() []NamedModule {
	return []NamedModule{{"tok_emb", g.TokEmb}, {"pos_emb", g.PosEmb}, {"drop", g.Drop}, {"blocks", g.Blocks}, {"ln_f", g.LNF}, {"head", g.Head}}
}
