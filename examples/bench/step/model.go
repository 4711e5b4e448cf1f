package main

import (
	"math/rand/v2"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// spec is one benchmark model.
type spec struct {
	batch   int
	inDims  []int
	classes int // 0: regression targets of outDim
	outDim  int
	// tokens: the inputs are token ids [batch, inDims[0]] below classes
	// and the labels the next token at every position.
	tokens bool
	// clip is the gradients' global norm bound (0: none).
	clip  float64
	build func(d *xla.Device, rng *rand.Rand) (nn.Module, error)
	loss  func(out, target *xla.Tensor) *xla.Tensor
	opt   func(params []nn.Named) (optim.Optimizer, error)
}

// gptBench is the benchmark GPT: examples/gpt's small preset.
var gptBench = nn.GPTConfig{Vocab: 65, BlockSize: 64, Layers: 4, Heads: 4, Width: 128}

func specOf(model string) spec {
	if model == "gpt" {
		return spec{batch: 32, inDims: []int{gptBench.BlockSize}, classes: gptBench.Vocab, tokens: true, clip: 1,
			build: func(d *xla.Device, rng *rand.Rand) (nn.Module, error) { return nn.NewGPT(d, rng, gptBench) },
			loss: func(out, y *xla.Tensor) *xla.Tensor {
				return nn.CrossEntropyLoss(out.Reshape(-1, gptBench.Vocab), y, nn.ReductionMean)
			},
			opt: func(ps []nn.Named) (optim.Optimizer, error) {
				return optim.NewAdamWGroups(optim.DecayGroups(ps, 0.1), optim.AdamConfig{LR: 1e-3, Beta2: 0.99})
			}}
	}
	if model == "resnet18-cifar" {
		return spec{batch: 32, inDims: []int{3, 32, 32}, classes: 10,
			build: func(d *xla.Device, rng *rand.Rand) (nn.Module, error) {
				return nn.NewResNet18(d, rng, nn.ResNetConfig{NumClasses: 10, CIFAR: true})
			},
			loss: func(out, y *xla.Tensor) *xla.Tensor { return nn.CrossEntropyLoss(out, y, nn.ReductionMean) },
			opt: func(ps []nn.Named) (optim.Optimizer, error) {
				return optim.NewSGD(tensorsOf(ps), optim.SGDConfig{LR: 0.01, Momentum: 0.9})
			}}
	}
	if model == "resnet18" {
		return spec{batch: 8, inDims: []int{3, 224, 224}, classes: 1000,
			build: func(d *xla.Device, rng *rand.Rand) (nn.Module, error) {
				return nn.NewResNet18(d, rng, nn.ResNetConfig{NumClasses: 1000})
			},
			loss: func(out, y *xla.Tensor) *xla.Tensor { return nn.CrossEntropyLoss(out, y, nn.ReductionMean) },
			opt: func(ps []nn.Named) (optim.Optimizer, error) {
				return optim.NewSGD(tensorsOf(ps), optim.SGDConfig{LR: 0.01, Momentum: 0.9})
			}}
	}
	if model == "toy" {
		return spec{batch: 20, inDims: []int{10}, outDim: 5,
			build: func(d *xla.Device, rng *rand.Rand) (nn.Module, error) {
				l1, err := nn.NewLinear(d, rng, 10, 10, true)
				if err != nil {
					return nil, err
				}
				l2, err := nn.NewLinear(d, rng, 10, 5, true)
				return nn.NewSequential(l1, nn.ReLU{}, l2), err
			},
			loss: func(out, y *xla.Tensor) *xla.Tensor { return nn.MSELoss(out, y, nn.ReductionMean) },
			opt: func(ps []nn.Named) (optim.Optimizer, error) {
				return optim.NewSGD(tensorsOf(ps), optim.SGDConfig{LR: 0.001})
			}}
	}
	return spec{batch: 64, inDims: []int{1, 28, 28}, classes: 10,
		build: func(d *xla.Device, rng *rand.Rand) (nn.Module, error) { return nn.NewMNISTNet(d, rng) },
		loss:  func(out, y *xla.Tensor) *xla.Tensor { return nn.NLLLoss(out.LogSoftmax(1), y, nn.ReductionMean) },
		opt: func(ps []nn.Named) (optim.Optimizer, error) {
			return optim.NewAdadelta(tensorsOf(ps), optim.AdadeltaConfig{LR: 1.0})
		}}
}

func tensorsOf(named []nn.Named) []*xla.Tensor {
	out := make([]*xla.Tensor, len(named))
	for i, n := range named {
		out[i] = n.Tensor
	}
	return out
}

// tokensOf returns a tokens model's replica r batch: rows of random ids
// and, for each, the id after it.
func (s spec) tokensOf(seed uint64, r int) (ids, next []int32) {
	rng := rand.New(rand.NewPCG(seed, uint64(1000+r)))
	t := s.inDims[0]
	stream := make([]int32, s.batch*(t+1))
	for i := range stream {
		stream[i] = int32(rng.IntN(s.classes))
	}
	for b := range s.batch {
		row := stream[b*(t+1) : (b+1)*(t+1)]
		ids, next = append(ids, row[:t]...), append(next, row[1:]...)
	}
	return ids, next
}

// batchOf returns replica r's fixed batch: inputs N(0,1), class labels or
// N(0,1) targets.
func (s spec) batchOf(seed uint64, r int) (x []float32, labels []int32, y []float32) {
	rng := rand.New(rand.NewPCG(seed, uint64(1000+r)))
	x = make([]float32, s.batch*product(s.inDims))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	if s.classes > 0 {
		labels = make([]int32, s.batch)
		for i := range labels {
			labels[i] = int32(rng.IntN(s.classes))
		}
		return x, labels, nil
	}
	y = make([]float32, s.batch*s.outDim)
	for i := range y {
		y[i] = float32(rng.NormFloat64())
	}
	return x, nil, y
}

func product(dims []int) int {
	p := 1
	for _, d := range dims {
		p *= d
	}
	return p
}

// replicaState is one replica's model, optimizer and batch on its device.
type replicaState struct {
	model  nn.Module
	opt    optim.Optimizer
	params []*xla.Tensor
	x, y   *xla.Tensor
}

func (s spec) setUp(d *xla.Device, seed uint64, r int) (*replicaState, error) {
	model, err := s.build(d, nn.NewRand(seed))
	if err != nil {
		return nil, err
	}
	opt, err := s.opt(nn.NamedParameters(model))
	if err != nil {
		return nil, err
	}
	x, y, err := s.upload(d, seed, r)
	return &replicaState{model: model, opt: opt, params: nn.Parameters(model), x: x, y: y}, err
}

// upload puts replica r's batch on d: float inputs, or Int32 token ids.
func (s spec) upload(d *xla.Device, seed uint64, r int) (x, y *xla.Tensor, err error) {
	dims := append([]int{s.batch}, s.inDims...)
	if s.tokens {
		ids, next := s.tokensOf(seed, r)
		if x, err = xla.FromSlice(d, ids, dims...); err != nil {
			return nil, nil, err
		}
		y, err = xla.FromSlice(d, next, len(next))
		return x, y, err
	}
	xs, labels, ys := s.batchOf(seed, r)
	if x, err = xla.FromSlice(d, xs, dims...); err != nil {
		return nil, nil, err
	}
	switch {
	case labels != nil:
		y, err = xla.FromSlice(d, labels, s.batch)
	default:
		y, err = xla.FromSlice(d, ys, s.batch, s.outDim)
	}
	return x, y, err
}

// step records one training step with gradients averaged across replicas
// (by the wrapper when the model is wrapped).
func (rs *replicaState) step(s spec, replicas int) error {
	loss := s.loss(rs.model.Forward(rs.x), rs.y)
	if err := loss.Backward(); err != nil {
		return err
	}
	if _, wrapped := rs.model.(*ddp.DistributedDataParallel); !wrapped && replicas > 1 {
		for _, p := range rs.params {
			if err := p.SetGrad(xla.AllReduce(p.Grad(), xla.ReduceMean)); err != nil {
				return err
			}
		}
	}
	if s.clip > 0 {
		if _, err := optim.ClipGradNorm(rs.params, s.clip, 2); err != nil {
			return err
		}
	}
	if err := rs.opt.Step(); err != nil {
		return err
	}
	rs.opt.ZeroGrad()
	return nil
}
