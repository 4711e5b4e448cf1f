// Command ddptoy is the Neuron DDP tutorial's training program in Go: the
// 10→10→5 MLP trained with MSE and SGD, wrapped in ddp.Wrap, one process
// per rank (launch it with torchrun's environment: RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT). It prints rank 0's final loss.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

func main() {
	if err := train(context.Background(), 100); err != nil {
		log.Fatal(err)
	}
}

func train(ctx context.Context, steps int) error {
	if err := ddp.Init(ctx, ddp.NewOptions()); err != nil {
		return err
	}
	defer ddp.Destroy()
	b, err := backend.Open(ctx, backend.Options{})
	if err != nil {
		return err
	}
	d := xla.NewEngine(b).Device(0)
	rng := nn.NewRand(uint64(ddp.Rank()))
	l1, err1 := nn.NewLinear(d, rng, 10, 10, true)
	l2, err2 := nn.NewLinear(d, rng, 10, 5, true)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	model, err := ddp.Wrap(ctx, nn.NewSequential(l1, nn.ReLU{}, l2), ddp.GradientAsBucketView())
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: 0.001})
	if err != nil {
		return err
	}
	var loss *xla.Tensor
	for range steps {
		opt.ZeroGrad()
		x, y := d.RandN(xla.Float32, 20, 10), d.RandN(xla.Float32, 20, 5)
		loss = nn.MSELoss(model.Forward(x), y, nn.ReductionMean)
		if err := optim.BackwardStep(ctx, loss, opt); err != nil {
			return err
		}
	}
	final, err := loss.Item(ctx)
	if err == nil && ddp.Rank() == 0 {
		fmt.Printf("final loss %.4f\n", final)
	}
	return err
}
