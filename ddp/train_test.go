package ddp

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// The models the equivalence tests train on a fixed global batch of
// globalRows rows: "toy" (10→10→5, MSE, SGD), "cnn" (conv, BatchNorm,
// ReLU, max pool, linear; cross-entropy, SGD with momentum) and "branch"
// (the toy with a middle layer used on even steps only, trained with
// FindUnusedParameters), "wide" (10→wideHidden→5: gradients large
// enough for the ring and shared-memory all-reduces) and "gpt" (a small
// GPT on next-token prediction: AdamW with decay groups, clipping at 1,
// warmup and cosine). 48 rows divide into 2, 3 and 4 replicas of 4
// micro-batches.
const globalRows = 48

// gptTestConfig is the "gpt" model: 1 block, 2 heads, width 16.
var gptTestConfig = nn.GPTConfig{Vocab: 11, BlockSize: 8, Layers: 1, Heads: 2, Width: 16}

const wideHidden = 8192

// branchy applies mid on even steps only.
type branchy struct {
	l1, mid, l2 *nn.Linear
	step        *int
}

func (b *branchy) Forward(x *xla.Tensor) *xla.Tensor {
	h := b.l1.Forward(x).Relu()
	if *b.step%2 == 0 {
		h = b.mid.Forward(h).Relu()
	}
	return b.l2.Forward(h)
}
func (b *branchy) Params() []nn.Named  { return nil }
func (b *branchy) Buffers() []nn.Named { return nil }
func (b *branchy) Children() []nn.NamedModule {
	return []nn.NamedModule{{Name: "l1", Module: b.l1}, {Name: "mid", Module: b.mid}, {Name: "l2", Module: b.l2}}
}

// newModel builds kind on d from seed; step is read by "branch".
func newModel(d *xla.Device, kind string, seed uint64, step *int) (nn.Module, error) {
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
			return &branchy{l1: l1, mid: mid, l2: l2, step: step}, nil
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

// batchRows uploads rows [lo, hi) of kind's global batch and returns the
// loss of model on them, a mean over the rows.
func lossOn(d *xla.Device, model nn.Module, kind string, lo, hi int) (*xla.Tensor, error) {
	rng := rand.New(rand.NewPCG(7, 8))
	if kind == "gpt" {
		return gptLossOn(d, model, rng, lo, hi)
	}
	if kind == "cnn" {
		xs := make([]float32, globalRows*64)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		labels := make([]int32, globalRows)
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
	xs, ys := make([]float32, globalRows*10), make([]float32, globalRows*5)
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
	stream := make([]int32, globalRows*(t+1))
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

// trainRun says what trainModel trains.
type trainRun struct {
	kind  string
	seed  uint64
	steps int
	// shards are the row ranges of each step, each one Backward of its
	// mean loss divided by len(shards) (accumulated; under NoSync but the
	// last when wrapped).
	shards [][2]int
	wrap   bool
	opts   []WrapOption
	mark   func() error
	// compiled trains with two compiled steps, forward+backward and the
	// update, and (wrapped, with ManualSync) SyncGradients between them.
	compiled bool
	// syncs, when set, receives the wrapper's GradientSyncs at the end.
	syncs *int
	// optimizer replaces the kind's (optimizerFor); zero shards it
	// (ZeroRedundancyOptimizer; needs wrap).
	optimizer string
	zero      bool
	// losses, when set, receives each step's loss (the last micro-batch's).
	losses *[]float32
}

// optimizerRecipe is how a test model is optimized: its parameter groups
// (nil: one), the optimizer built over groups (the model's, or a sharded
// optimizer's shards), whether the gradients are clipped at 1 before
// each step, and the schedule (nil: none).
type optimizerRecipe struct {
	groups   []optim.ParamGroup
	build    NewOptimizer
	clip     bool
	schedule func(optim.Optimizer) (optim.Scheduler, error)
}

// optimizerFor returns kind's optimizer recipe; name, when set, replaces
// the kind's optimizer ("adam", "adamw", "adadelta", "nesterov").
func optimizerFor(kind, name string, model nn.Module) optimizerRecipe {
	if kind == "gpt" && (name == "" || name == "noclip") {
		return optimizerRecipe{
			groups: optim.DecayGroups(nn.NamedParameters(model), 0.1),
			build: func(groups []optim.ParamGroup) (optim.Optimizer, error) {
				return optim.NewAdamWGroups(groups, optim.AdamConfig{LR: 3e-3, Beta2: 0.99})
			},
			clip: name == "",
			schedule: func(opt optim.Optimizer) (optim.Scheduler, error) {
				return optim.NewWarmupCosine(opt, 5, 20, 3e-4)
			},
		}
	}
	sgd := func(cfg optim.SGDConfig) NewOptimizer {
		return func(groups []optim.ParamGroup) (optim.Optimizer, error) { return optim.NewSGD(groups[0].Params, cfg) }
	}
	build := sgd(optim.SGDConfig{LR: 0.1})
	switch {
	case name == "adam":
		build = func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewAdam(groups[0].Params, optim.AdamConfig{LR: 1e-2, WeightDecay: 0.01})
		}
	case name == "adamw":
		build = func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewAdamW(groups[0].Params, optim.AdamConfig{LR: 1e-2, WeightDecay: 0.1})
		}
	case name == "adadelta":
		build = func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewAdadelta(groups[0].Params, optim.AdadeltaConfig{LR: 1, WeightDecay: 0.01})
		}
	case name == "nesterov":
		build = sgd(optim.SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3})
	case kind == "cnn":
		build = sgd(optim.SGDConfig{LR: 0.05, Momentum: 0.9})
	case kind == "wide":
		build = sgd(optim.SGDConfig{LR: 0.01})
	}
	return optimizerRecipe{build: build}
}

// trainModel trains run on d and returns the parameters.
func trainModel(ctx context.Context, d *xla.Device, run trainRun) ([][]float32, error) {
	step := 0
	model, err := newModel(d, run.kind, run.seed, &step)
	if err != nil {
		return nil, err
	}
	var wrapped *DistributedDataParallel
	if run.wrap {
		opts := run.opts
		if run.kind == "branch" {
			opts = append(opts, FindUnusedParameters())
		}
		if run.compiled {
			opts = append(opts, ManualSync())
		}
		if wrapped, err = Wrap(ctx, model, opts...); err != nil {
			return nil, err
		}
		defer wrapped.Close()
		model = wrapped
	}
	opt, beforeStep, afterStep, err := buildOptimizer(ctx, run, model, wrapped)
	if err != nil {
		return nil, err
	}
	if wrapped != nil && run.syncs != nil {
		defer func() { *run.syncs = wrapped.GradientSyncs() }()
	}
	var losses []*xla.Tensor
	backward := func(s [2]int) error {
		loss, err := lossOn(d, model, run.kind, s[0], s[1])
		if err != nil {
			return err
		}
		if run.losses != nil && s == run.shards[len(run.shards)-1] {
			losses = append(losses, loss.Detach())
		}
		return loss.DivScalar(float64(len(run.shards))).Backward()
	}
	if run.losses != nil {
		defer func() {
			for _, l := range losses {
				v, _ := l.Item(ctx)
				*run.losses = append(*run.losses, float32(v))
			}
		}()
	}
	if run.compiled {
		return trainCompiled(ctx, d, run, model, wrapped, opt, backward)
	}
	for ; step < run.steps; step++ {
		opt.ZeroGrad()
		last := len(run.shards) - 1
		accumulate := func() error {
			for _, s := range run.shards[:last] {
				if err := backward(s); err != nil {
					return err
				}
			}
			return nil
		}
		if wrapped != nil {
			err = wrapped.NoSync(accumulate)
		} else {
			err = accumulate()
		}
		if err != nil {
			return nil, err
		}
		if err := backward(run.shards[last]); err != nil {
			return nil, err
		}
		if err := beforeStep(); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, err
		}
		afterStep()
		if err := run.mark(); err != nil {
			return nil, err
		}
	}
	return parameterValues(ctx, model)
}

// buildOptimizer makes run's optimizer for model (sharded over the
// replicas when run.zero) and what runs between the last Backward and
// Step (clipping) and after Step (the schedule).
func buildOptimizer(ctx context.Context, run trainRun, model nn.Module, wrapped *DistributedDataParallel) (
	opt optim.Optimizer, beforeStep func() error, afterStep func(), err error) {
	recipe := optimizerFor(run.kind, run.optimizer, model)
	beforeStep, afterStep = func() error { return nil }, func() {}
	if run.zero {
		z, err := NewZeroRedundancyOptimizer(ctx, wrapped, recipe.groups, recipe.build)
		if err != nil {
			return nil, nil, nil, err
		}
		if recipe.clip {
			beforeStep = func() error { return z.ClipGradNorm(1, 2) }
		}
		opt = z
	} else {
		groups := recipe.groups
		if groups == nil {
			groups = []optim.ParamGroup{{Params: nn.Parameters(model)}}
		}
		if opt, err = recipe.build(groups); err != nil {
			return nil, nil, nil, err
		}
		if recipe.clip {
			beforeStep = func() error {
				_, err := optim.ClipGradNorm(nn.Parameters(model), 1, 2)
				return err
			}
		}
	}
	if recipe.schedule != nil {
		sched, err := recipe.schedule(opt)
		if err != nil {
			return nil, nil, nil, err
		}
		afterStep = sched.Step
	}
	return opt, beforeStep, afterStep, nil
}

// trainCompiled is trainModel's loop with compiled steps (one shard).
func trainCompiled(ctx context.Context, d *xla.Device, run trainRun, model nn.Module, wrapped *DistributedDataParallel,
	opt optim.Optimizer, backward func([2]int) error) ([][]float32, error) {
	gradStep := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		opt.ZeroGrad()
		return nil, backward(run.shards[0])
	})
	updateStep := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) { return nil, opt.Step() })
	for range run.steps {
		if _, err := gradStep.Run(ctx, d); err != nil {
			return nil, err
		}
		if wrapped != nil {
			if err := wrapped.SyncGradients(ctx); err != nil {
				return nil, err
			}
		}
		if _, err := updateStep.Run(ctx, d); err != nil {
			return nil, err
		}
	}
	return parameterValues(ctx, model)
}

// parameterValues reads every parameter of model.
func parameterValues(ctx context.Context, model nn.Module) ([][]float32, error) {
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

// joinJob is a worker scenario's start: the default process group from
// the environment and a CPU engine of devices devices. done undoes both.
func joinJob(ctx context.Context, devices int) (e *xla.Engine, done func(), err error) {
	if err := dist.Init(ctx, workerOptions()); err != nil {
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

// split cuts rows [lo, hi) into n equal shards.
func split(lo, hi, n int) [][2]int {
	out := make([][2]int, n)
	for i := range out {
		out[i] = [2]int{lo + i*(hi-lo)/n, lo + (i+1)*(hi-lo)/n}
	}
	return out
}
