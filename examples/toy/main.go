// Command toy is the Neuron DDP tutorial's loop (10→10→5 MLP, MSE, SGD), kept in --checkpoint-dir.
package main

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

func main() { ddp.Main(train) }

func train(ctx context.Context, w ddp.Worker) error {
	d, rng := w.Device, nn.NewRand(uint64(w.Rank))
	model, err := ddp.Wrap(ctx, nn.NewSequential(nn.Dense(d, rng, 10, 10), nn.ReLU{}, nn.Dense(d, rng, 10, 5)), ddp.GradientAsBucketView())
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.001})
	if err != nil {
		return err
	}
	steps, finish := checkpoint.Steps(ctx, w.Checkpoints, 100, optim.Checkpoint{Model: model, Optimizer: opt, RNG: d})
	for step := range steps {
		opt.ZeroGrad()
		loss := nn.MSELoss(model.Forward(d.RandN(xla.Float32, 20, 10)), d.RandN(xla.Float32, 20, 5), nn.ReductionMean)
		if err := optim.BackwardStep(ctx, loss, opt); err != nil {
			return err
		}
		if w.Rank == 0 && step%10 == 0 {
			fmt.Printf("Loss after step %d: %.4f\n", step, loss)
		}
	}
	return finish()
}
