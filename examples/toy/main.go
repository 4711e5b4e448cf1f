// Command toy is the Neuron DDP tutorial: a 10→10→5 MLP, MSE, SGD 0.001 for 100
// steps. Run it with --spawn (a replica per device) or as a rank under ddprun.
// It takes the examples' shared flags: --seed, --max-steps, --log-interval,
// --checkpoint and --resume (the model and optimizer, safetensors with
// torch's names), --metrics and --plot.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

const steps = 100

type config struct {
	cmdline.Run
	seed uint64
}

func main() {
	cmdline.Main("toy", func(ctx context.Context, args []string, out io.Writer) error {
		fs, launch := cmdline.FlagSet("toy", out)
		var c config
		fs.Uint64Var(&c.seed, "seed", 0, "seed of the initial model and of each rank's data (seed+rank)")
		c.Run.AddFlags(fs, 10)
		if err := cmdline.Parse(fs, args); err != nil {
			return err
		}
		if c.LogInterval < 1 {
			return fmt.Errorf("--log-interval=%d: must be positive", c.LogInterval)
		}
		if err := c.Check(); err != nil {
			return err
		}
		return ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error { return train(ctx, c, w, out) }, *launch)
	})
}

func train(ctx context.Context, c config, w ddp.Worker, out io.Writer) error {
	d, rng := w.Device, nn.NewRand(c.seed+uint64(w.Rank))
	if c.seed != 0 {
		if err := d.ManualSeed(int64(c.seed + uint64(w.Rank))); err != nil {
			return err
		}
	}
	model, err := ddp.Wrap(ctx, nn.NewSequential(nn.Dense(d, rng, 10, 10), nn.ReLU{}, nn.Dense(d, rng, 10, 5)), ddp.GradientAsBucketView())
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.001})
	if err != nil {
		return err
	}
	ck, curves, last := optim.Checkpoint{Model: model, Optimizer: opt}, report.Curves{Title: "toy"}, steps
	if c.Resume {
		if err := checkpoint.Load(ctx, c.Checkpoint, &ck); err != nil {
			return err
		}
	}
	if c.MaxSteps > 0 {
		last = min(last, ck.Epoch+c.MaxSteps)
	}
	for step := ck.Epoch + 1; step <= last; step++ {
		opt.ZeroGrad()
		loss := nn.MSELoss(model.Forward(d.RandN(xla.Float32, 20, 10)), d.RandN(xla.Float32, 20, 5), nn.ReductionMean)
		if err := optim.BackwardStep(ctx, loss, opt); err != nil {
			return err
		}
		if w.Rank == 0 && step%c.LogInterval == 0 {
			v, err := loss.Item(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "Loss after step %d: %.4f\n", step, v)
			curves.AddLoss(step, v)
		}
	}
	if c.Checkpoint != "" {
		ck.Epoch = last // the steps done
		if err := checkpoint.Save(ctx, c.Checkpoint, ck); err != nil {
			return err
		}
	}
	if w.Rank == 0 {
		return c.Finish(out, &curves)
	}
	return nil
}
