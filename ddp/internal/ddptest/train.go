package ddptest

import (
	"context"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// Run says what TrainModel trains.
type Run struct {
	Kind  string
	Seed  uint64
	Steps int
	// Shards are the row ranges of each step, each one Backward of its
	// mean loss divided by len(shards) (accumulated; under NoSync but the
	// last when wrapped).
	Shards [][2]int
	Wrap   bool
	Opts   []ddp.WrapOption
	Mark   func() error
	// Compiled trains with two compiled steps, forward+backward and the
	// update, and (wrapped, with ManualSync) SyncGradients between them.
	Compiled bool
	// Syncs, when set, receives the wrapper's GradientSyncs at the end.
	Syncs *int
	// Optimizer replaces the kind's (OptimizerFor); Zero shards it
	// (zero.ZeroRedundancyOptimizer; needs Wrap).
	Optimizer string
	Zero      bool
	// Losses, when set, receives each step's loss (the last micro-batch's).
	Losses *[]float32
}

// Recipe is how a test model is optimized: its parameter groups
// (nil: one), the optimizer built over groups (the model's, or a sharded
// optimizer's shards), whether the gradients are clipped at 1 before
// each step, and the schedule (nil: none).
type Recipe struct {
	Groups   []optim.ParamGroup
	Build    zero.NewOptimizer
	Clip     bool
	Schedule func(optim.Optimizer) (optim.Scheduler, error)
}

// OptimizerFor returns kind's optimizer recipe; name, when set, replaces
// the kind's optimizer ("adam", "adamw", "adadelta", "nesterov").
func OptimizerFor(kind, name string, model nn.Module) Recipe {
	if kind == "gpt" && name == "" {
		return Recipe{
			Groups: optim.DecayGroups(nn.NamedParameters(model), 0.1),
			Build: func(groups []optim.ParamGroup) (optim.Optimizer, error) {
				return optim.NewAdamWGroups(groups, optim.AdamConfig{LR: 3e-3, Beta2: 0.99})
			},
			Clip: true,
			Schedule: func(opt optim.Optimizer) (optim.Scheduler, error) {
				return optim.NewWarmupCosine(opt, 5, 20, 3e-4)
			},
		}
	}
	sgd := func(cfg optim.SGDConfig) zero.NewOptimizer {
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
	return Recipe{Build: build}
}

// TrainModel trains run on d and returns the parameters.
func TrainModel(ctx context.Context, d *xla.Device, run Run) ([][]float32, error) {
	step := 0
	model, err := NewModel(d, run.Kind, run.Seed, &step)
	if err != nil {
		return nil, err
	}
	var wrapped *ddp.DistributedDataParallel
	if run.Wrap {
		if wrapped, err = ddp.Wrap(ctx, model, wrapOptions(run)...); err != nil {
			return nil, err
		}
		defer wrapped.Close()
		model = wrapped
	}
	opt, beforeStep, afterStep, err := buildOptimizer(ctx, run, model, wrapped)
	if err != nil {
		return nil, err
	}
	if wrapped != nil && run.Syncs != nil {
		defer func() { *run.Syncs = wrapped.GradientSyncs() }()
	}
	var losses []*xla.Tensor
	backward := func(s [2]int) error {
		loss, err := LossOn(d, model, run.Kind, s[0], s[1])
		if err != nil {
			return err
		}
		if run.Losses != nil && s == run.Shards[len(run.Shards)-1] {
			losses = append(losses, loss.Detach())
		}
		return loss.DivScalar(float64(len(run.Shards))).Backward()
	}
	if run.Losses != nil {
		defer func() {
			for _, l := range losses {
				v, _ := l.Item(ctx)
				*run.Losses = append(*run.Losses, float32(v))
			}
		}()
	}
	if run.Compiled {
		return trainCompiled(ctx, d, run, model, wrapped, opt, backward)
	}
	// "branch" reads step through the pointer NewModel was given.
	for ; step < run.Steps; step++ {
		if err := trainStep(run, wrapped, opt, backward, beforeStep, afterStep); err != nil {
			return nil, err
		}
	}
	return ParameterValues(ctx, model)
}

// wrapOptions are run's wrapper options, with what its kind and mode need.
func wrapOptions(run Run) []ddp.WrapOption {
	opts := run.Opts
	if run.Kind == "branch" {
		opts = append(opts, ddp.FindUnusedParameters())
	}
	if run.Compiled {
		opts = append(opts, ddp.ManualSync())
	}
	return opts
}

// trainStep is one step of TrainModel's loop: the shards but the last
// accumulated (under NoSync when wrapped), the last one's Backward, the
// update and run's Mark.
func trainStep(run Run, wrapped *ddp.DistributedDataParallel, opt optim.Optimizer, backward func([2]int) error,
	beforeStep func() error, afterStep func()) error {
	opt.ZeroGrad()
	last := len(run.Shards) - 1
	accumulate := func() error {
		for _, s := range run.Shards[:last] {
			if err := backward(s); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if wrapped != nil {
		err = wrapped.NoSync(accumulate)
	} else {
		err = accumulate()
	}
	if err != nil {
		return err
	}
	if err := backward(run.Shards[last]); err != nil {
		return err
	}
	if err := beforeStep(); err != nil {
		return err
	}
	if err := opt.Step(); err != nil {
		return err
	}
	afterStep()
	return run.Mark()
}

// buildOptimizer makes run's optimizer for model (sharded over the
// replicas when run.Zero) and what runs between the last Backward and
// Step (clipping) and after Step (the schedule).
func buildOptimizer(ctx context.Context, run Run, model nn.Module, wrapped *ddp.DistributedDataParallel) (
	opt optim.Optimizer, beforeStep func() error, afterStep func(), err error) {
	recipe := OptimizerFor(run.Kind, run.Optimizer, model)
	beforeStep, afterStep = func() error { return nil }, func() {}
	if run.Zero {
		z, err := zero.New(ctx, wrapped, recipe.Groups, recipe.Build)
		if err != nil {
			return nil, nil, nil, err
		}
		if recipe.Clip {
			beforeStep = func() error { return z.ClipGradNorm(1, 2) }
		}
		opt = z
	} else {
		groups := recipe.Groups
		if groups == nil {
			groups = []optim.ParamGroup{{Params: nn.Parameters(model)}}
		}
		if opt, err = recipe.Build(groups); err != nil {
			return nil, nil, nil, err
		}
		if recipe.Clip {
			beforeStep = func() error {
				_, err := optim.ClipGradNorm(nn.Parameters(model), 1, 2)
				return err
			}
		}
	}
	if recipe.Schedule != nil {
		sched, err := recipe.Schedule(opt)
		if err != nil {
			return nil, nil, nil, err
		}
		afterStep = sched.Step
	}
	return opt, beforeStep, afterStep, nil
}

// trainCompiled is TrainModel's loop with compiled steps (one shard).
func trainCompiled(ctx context.Context, d *xla.Device, run Run, model nn.Module, wrapped *ddp.DistributedDataParallel,
	opt optim.Optimizer, backward func([2]int) error) ([][]float32, error) {
	gradStep := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		opt.ZeroGrad()
		return nil, backward(run.Shards[0])
	})
	updateStep := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) { return nil, opt.Step() })
	for range run.Steps {
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
	return ParameterValues(ctx, model)
}
