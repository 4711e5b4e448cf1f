// Command linear is the MPI/SageMaker CPU basics example: a random dataset
// (100 samples of 5 features, 2 targets), a linear model, a
// DistributedSampler giving each rank its share, the global batch of 30
// split over the ranks, and every rank printing the sizes its model sees
// inside and outside, as the seed does. Gradients average over the host
// process group (ddp.Wrap) when it runs as ranks of a launcher:
//
//	ddprun --nproc_per_node=2 linear
//	mpirun --allow-run-as-root --oversubscribe -np 2 linear
//	linear --spawn --cpu-devices 2
//
// With --deterministic the trained weights are the same bits at any of
// them (docs/deterministic.md); every run prints their sha256.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

const inputSize, outputSize, dataSize = 5, 2, 100

type config struct {
	cmdline.Run
	launch            ddp.Options
	epochs, batchSize int
	lr                float64
	seed              uint64
	det               cmdline.Determinism
}

// printing is the model of the seed: it reports the sizes it is given.
type printing struct {
	nn.Module
	rank int
	out  io.Writer
}

func (p printing) Forward(x *xla.Tensor) *xla.Tensor {
	y := p.Module.Forward(x)
	fmt.Fprintf(p.out, "rank %d: In Model: input size %v output size %v\n", p.rank, x.Shape().Dimensions, y.Shape().Dimensions)
	return y
}

func main() {
	cmdline.Main("linear", func(ctx context.Context, args []string, out io.Writer) error {
		_, err := run(ctx, args, out)
		return err
	})
}

// syncWriter keeps spawned replicas' lines whole.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs, launch := cmdline.FlagSet("linear", out)
	fs.IntVar(&c.epochs, "epochs", 5, "epochs over the random dataset")
	fs.IntVar(&c.batchSize, "batch-size", 30, "global batch size, split over the ranks")
	fs.Float64Var(&c.lr, "lr", 0.1, "SGD learning rate")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the dataset, the model and the data order")
	c.Run.AddFlags(fs, 1)
	c.det.AddFlags(fs, 5)
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	c.launch, c.Preemption = *launch, cmdline.Preemption(launch.Checkpoints)
	c.launch.Device.Deterministic = c.det.On
	switch {
	case c.epochs < 1 || c.batchSize < 1:
		return c, fmt.Errorf("--epochs=%d and --batch-size=%d must be positive", c.epochs, c.batchSize)
	case !(c.lr > 0):
		return c, fmt.Errorf("--lr=%g: must be positive", c.lr)
	case c.batchSize > dataSize:
		return c, fmt.Errorf("--batch-size=%d: larger than the %d samples of the dataset; give at most %d", c.batchSize, dataSize, dataSize)
	case c.LogInterval < 1:
		return c, fmt.Errorf("--log-interval=%d: must be positive", c.LogInterval)
	}
	if err := c.det.Check(c.batchSize); err != nil {
		return c, err
	}
	return c, c.Check()
}

// result is rank 0's view of the run.
type result struct {
	// EpochLosses are the mean losses of rank 0's batches per epoch
	// (with --deterministic, of the global batches).
	EpochLosses []float64
	// Before and After are the loss over the whole dataset before and
	// after training.
	Before, After float64
}

// run trains and returns rank 0's result.
func run(ctx context.Context, args []string, out io.Writer) (result, error) {
	out = &syncWriter{w: out} // spawned replicas print at once
	c, err := parse(args, out)
	if err != nil {
		return result{}, err
	}
	dataset, err := data.NewRandom(dataSize, []int{inputSize}, []int{outputSize}, 0, c.seed)
	if err != nil {
		return result{}, err
	}
	var res result
	err = ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error {
		r, err := train(ctx, c, w, dataset, out)
		if w.Rank == 0 {
			res = r
		}
		return err
	}, c.launch)
	return res, err
}

// datasetLoss is the model's mean loss over the whole dataset; every
// replica computes it (the replicas of one process run the same programs).
func datasetLoss(ctx context.Context, m nn.Module, d *xla.Device, dataset *data.Random) (float64, error) {
	loader, err := data.NewLoader(dataset, d, data.LoaderConfig{BatchSize: dataset.Len()})
	if err != nil {
		return 0, err
	}
	for batch, err := range loader.Epoch(ctx, 0) {
		if err != nil {
			return 0, err
		}
		return nn.MSELoss(m.Forward(batch.Input), batch.Target, nn.ReductionMean).Item(ctx)
	}
	return 0, fmt.Errorf("the dataset is empty")
}

func train(ctx context.Context, c config, w ddp.Worker, dataset *data.Random, out io.Writer) (res result, err error) {
	d := w.Device
	linear := nn.Dense(d, nn.NewRand(c.seed), inputSize, outputSize)
	model, err := ddp.Wrap(ctx, printing{Module: linear, rank: w.Rank, out: out}, c.det.WrapOptions(c.batchSize, c.seed)...)
	if err != nil {
		return res, err
	}
	if res.Before, err = datasetLoss(ctx, linear, d, dataset); err != nil {
		return res, err
	}
	defer model.Close()
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: c.lr})
	if err != nil {
		return res, err
	}
	feed, err := cmdline.NewGlobalFeed(out, w, model, dataset.Len(), c.batchSize, c.seed, fmt.Sprintf("%d ranks", w.WorldSize))
	if err != nil {
		return res, err
	}
	loader, err := data.NewLoader(dataset, d, data.LoaderConfig{BatchSize: feed.Batch, Sampler: feed.Sampler})
	if err != nil {
		return res, err
	}
	ck := optim.Checkpoint{Model: model, Optimizer: opt}
	resumer, at, resumed, err := c.Open(ctx, &ck, w.WorldSize, feed.Batch, w.Rank == 0, out)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, resumer.Close()) }()
	switch {
	case resumed:
		err = errors.Join(c.det.CheckResumed(ck.Metadata, c.batchSize, "--checkpoint-dir "+c.Dir), feed.ResumeAt(at.Epoch, at.Samples))
	case c.Resume:
		if err = checkpoint.Load(ctx, c.Checkpoint, &ck); err == nil {
			err = c.det.CheckResumed(ck.Metadata, c.batchSize, "--checkpoint "+c.Checkpoint)
		}
		at = cmdline.Position{Epoch: ck.Epoch, Step: ck.Step}
	}
	if err != nil {
		return res, err
	}
	ck.Metadata = c.det.Mark(ck.Metadata, c.batchSize)
	// lossOf is a batch's loss, saying what the model saw, as the seed.
	lossOf := func(b data.Batch) *xla.Tensor {
		output := model.Forward(b.Input)
		fmt.Fprintf(out, "rank %d: Outside: input size %v output_size %v\n", w.Rank, b.Input.Shape().Dimensions, output.Shape().Dimensions)
		return nn.MSELoss(output, b.Target, nn.ReductionMean)
	}
	curves, steps := report.Curves{Title: "linear model"}, at.Step
	for epoch := at.Epoch; epoch < c.epochs; epoch++ {
		sum, n := 0.0, 0
		// The samples of the epoch's order used before a resume, and
		// the steps they made: the loader yields the rest.
		epochStart := at.Used(epoch)
		before := epochStart / feed.Global
		for st, err := range feed.Steps(loader.Epoch(ctx, epoch)) {
			if err != nil {
				return res, err
			}
			if c.MaxSteps > 0 && before+st.Index >= c.MaxSteps {
				break
			}
			loss, err := feed.TrainStep(ctx, model, opt, st.Batches, steps, lossOf)
			size := feed.Global
			if !feed.Deterministic() {
				size = st.Batches[0].Size // rank 0's loss: its batch, maybe the epoch's partial last
			}
			if err != nil {
				return res, err
			}
			v, err := loss.Item(ctx)
			if err != nil {
				return res, err
			}
			sum, n = sum+v*float64(size), n+size
			if steps++; steps%c.LogInterval == 0 {
				curves.AddLoss(steps, v)
			}
			at = cmdline.Position{Epoch: epoch, Samples: epochStart + (st.Index+1)*feed.Global, Step: steps}
			if err := resumer.Step(ctx, ck, at); err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
		}
		res.EpochLosses = append(res.EpochLosses, sum/float64(n))
		if w.Rank == 0 {
			whose := "rank 0's"
			if feed.Deterministic() {
				whose = "the global batches'"
			}
			fmt.Fprintf(out, "epoch %d: mean loss %.4f on %s %d samples\n", epoch+1, sum/float64(n), whose, n)
		}
		if c.Checkpoint != "" {
			saved := ck
			saved.Epoch, saved.Step = epoch+1, steps
			if err := checkpoint.Save(ctx, c.Checkpoint, saved); err != nil {
				return res, err
			}
		}
	}
	if res.After, err = datasetLoss(ctx, linear, d, dataset); err != nil {
		return res, err
	}
	digest, err := cmdline.WeightsDigest(ctx, linear)
	if err != nil {
		return res, err
	}
	if w.Rank == 0 {
		fmt.Fprintf(out, "weights sha256 %s\n", digest)
		fmt.Fprintf(out, "loss over the %d samples: %.4f before training, %.4f after\n", dataset.Len(), res.Before, res.After)
		if err := c.Finish(out, &curves); err != nil {
			return res, err
		}
	}
	return res, nil
}
