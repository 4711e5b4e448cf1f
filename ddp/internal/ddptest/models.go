package ddptest

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// GlobalRows is the fixed global batch the test models train on:: "toy" (10→10→5, MSE, SGD), "cnn" (conv, BatchNorm,
// ReLU, max pool, linear; cross-entropy, SGD with momentum) and "branch"
// (the toy with a middle layer used on even steps only, trained with
// FindUnusedParameters), "wide" (10→wideHidden→5: gradients large
// enough for the ring and shared-memory all-reduces) and "gpt" (a small
// GPT on next-token prediction: AdamW with decay groups, clipping at 1,
// warmup and cosine). 48 rows divide into 2, 3 and 4 replicas of 4
// micro-batches.
const GlobalRows = 48

// gptTestConfig is the "gpt" model: 1 block, 2 heads, width 16.
var gptTestConfig = nn.GPTConfig{Vocab: 11, BlockSize: 8, Layers: 1, Heads: 2, Width: 16}

const wideHidden = 8192

// Branchy is the "branch" model: mid applies on even *Step only.
type Branchy struct {
	l1, mid, l2 *nn.Linear
	Step        *int
}

func (b *Branchy) Forward(x *xla.Tensor) *xla.Tensor {
	h := b.l1.Forward(x).Relu()
	if *b.Step%2 == 0 {
		h = b.mid.Forward(h).Relu()
	}
	return b.l2.Forward(h)
}
func (b *Branchy) Params() []nn.Named  { return nil }
func (b *Branchy) Buffers() []nn.Named { return nil }
func (b *Branchy) Children() []nn.NamedModule {
	return []nn.NamedModule{{Name: "l1", Module: b.l1}, {Name: "mid", Module: b.mid}, {Name: "l2", Module: b.l2}}
}

// NewModel builds kind on d from seed; step is read by "branch".
func NewModel(d *xla.Device, kind string, seed uint64, step *int) (nn.Module, error) {
	rng := nn.NewRand(seed)
	switch kind {
	case "toy", "branch":
		l1, err := nn.NewLinear(d, rng, 10, 10, true)
		if err != nil {
			return nil, err
		}
		mid, err := nn.NewLinear(d, rng, 10, 10, true)
		if err != nil {
			return nil, err
		}
		l2, err := nn.NewLinear(d, rng, 10, 5, true)
		if err != nil {
			return nil, err
		}
		if kind == "branch" {
			return &Branchy{l1: l1, mid: mid, l2: l2, Step: step}, nil
		}
		return nn.NewSequential(l1, nn.ReLU{}, l2), nil
	case "wide":
		l1, err := nn.NewLinear(d, rng, 10, wideHidden, true)
		if err != nil {
			return nil, err
		}
		l2, err := nn.NewLinear(d, rng, wideHidden, 5, true)
		if err != nil {
			return nil, err
		}
		return nn.NewSequential(l1, nn.ReLU{}, l2), nil
	case "cnn":
		conv, err := nn.NewConv2d(d, rng, nn.Conv2dConfig{In: 1, Out: 4, Kernel: 3, Padding: 1, Bias: true})
		if err != nil {
			return nil, err
		}
		bn, err := nn.NewBatchNorm2d(d, 4)
		if err != nil {
			return nil, err
		}
		fc, err := nn.NewLinear(d, rng, 4*4*4, 3, true)
		if err != nil {
			return nil, err
		}
		pool, err := nn.NewMaxPool2d(2, 2, 0)
		if err != nil {
			return nil, err
		}
		return nn.NewSequential(conv, bn, nn.ReLU{}, pool, nn.Flatten{}, fc), nil
	case "gpt":
		return nn.NewGPT(d, rng, gptTestConfig)
	}
	return nil, fmt.Errorf("unknown model %q", kind)
}

// LossOn uploads rows [lo, hi) of kind's global batch and returns the
// loss of model on them, a mean over the rows.
func LossOn(d *xla.Device, model nn.Module, kind string, lo, hi int) (*xla.Tensor, error) {
	rng := rand.New(rand.NewPCG(7, 8))
	if kind == "gpt" {
		return gptLossOn(d, model, rng, lo, hi)
	}
	if kind == "cnn" {
		xs := make([]float32, GlobalRows*64)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		labels := make([]int32, GlobalRows)
		for i := range labels {
			labels[i] = int32(rng.IntN(3))
		}
		x, err := xla.FromSlice(d, xs[lo*64:hi*64], hi-lo, 1, 8, 8)
		if err != nil {
			return nil, err
		}
		y, err := xla.FromSlice(d, labels[lo:hi], hi-lo)
		if err != nil {
			return nil, err
		}
		return nn.CrossEntropyLoss(model.Forward(x), y, nn.ReductionMean), nil
	}
	xs, ys := make([]float32, GlobalRows*10), make([]float32, GlobalRows*5)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	for i := range ys {
		ys[i] = float32(rng.NormFloat64())
	}
	x, err := xla.FromSlice(d, xs[lo*10:hi*10], hi-lo, 10)
	if err != nil {
		return nil, err
	}
	y, err := xla.FromSlice(d, ys[lo*5:hi*5], hi-lo, 5)
	if err != nil {
		return nil, err
	}
	return nn.MSELoss(model.Forward(x), y, nn.ReductionMean), nil
}

// gptLossOn is the "gpt" model's mean next-token loss on rows [lo, hi)
// of a fixed token stream cut into rows of BlockSize+1 tokens.
func gptLossOn(d *xla.Device, model nn.Module, rng *rand.Rand, lo, hi int) (*xla.Tensor, error) {
	t, v := gptTestConfig.BlockSize, gptTestConfig.Vocab
	stream := make([]int32, GlobalRows*(t+1))
	for i := range stream {
		stream[i] = int32(rng.IntN(v))
	}
	ids, targets := make([]int32, 0, (hi-lo)*t), make([]int32, 0, (hi-lo)*t)
	for r := lo; r < hi; r++ {
		row := stream[r*(t+1) : (r+1)*(t+1)]
		ids, targets = append(ids, row[:t]...), append(targets, row[1:]...)
	}
	x, err := xla.FromSlice(d, ids, hi-lo, t)
	if err != nil {
		return nil, err
	}
	y, err := xla.FromSlice(d, targets, (hi-lo)*t)
	if err != nil {
		return nil, err
	}
	return nn.CrossEntropyLoss(model.Forward(x).Reshape(-1, v), y, nn.ReductionMean), nil
}

// ParameterValues reads every parameter of model.
func ParameterValues(ctx context.Context, model nn.Module) ([][]float32, error) {
	var out [][]float32
	for _, p := range nn.Parameters(model) {
		v, err := p.Float32s(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// JoinJob is a worker scenario's start: the default process group from
// the environment and a CPU engine of devices devices. done undoes both.
func JoinJob(ctx context.Context, devices int) (e *xla.Engine, done func(), err error) {
	if err := dist.Init(ctx, WorkerOptions()); err != nil {
		return nil, nil, err
	}
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: devices})
	if err != nil {
		_ = dist.Destroy()
		return nil, nil, err
	}
	e = xla.NewEngine(b)
	return e, func() {
		_ = e.Close()
		_ = dist.Destroy()
	}, nil
}

// Split cuts rows [lo, hi) into n equal shards.
func Split(lo, hi, n int) [][2]int {
	out := make([][2]int, n)
	for i := range out {
		out[i] = [2]int{lo + i*(hi-lo)/n, lo + (i+1)*(hi-lo)/n}
	}
	return out
}
