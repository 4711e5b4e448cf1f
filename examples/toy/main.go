// Command toy is the Neuron DDP tutorial: a 10→10→5 MLP, MSE, SGD 0.001 for 100
// steps. Run it with --spawn (a replica per device) or as a rank under ddprun.
package main

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp"
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
	for step := 1; step <= 100; step++ {
		opt.ZeroGrad()
		loss := nn.MSELoss(model.Forward(d.RandN(xla.Float32, 20, 10)), d.RandN(xla.Float32, 20, 5), nn.ReductionMean)
		if err := optim.BackwardStep(ctx, loss, opt); err != nil {
			return err
		}
		if w.Rank == 0 && step%10 == 0 {
			fmt.Printf("Loss after step %d: %.4f\n", step, loss)
		}
	}
	return nil
}
