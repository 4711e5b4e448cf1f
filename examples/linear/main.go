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
	"fmt"
	"io"
	"sync"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/training"
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
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	// The settings a resume from --checkpoint-dir must keep (or name
	// in --resume-override).
	if err := launch.Checkpoints.Record(fs, "lr", "batch-size", "seed"); err != nil {
		return c, err
	}
	c.launch = *launch
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
	if err := c.launch.Mode.CheckBatch(c.batch()); err != nil {
		return c, err
	}
	if err := c.CheckCheckpointKind(false); err != nil {
		return c, err
	}
	return c, c.Check(c.launch)
}

// batch is the global batch, cut into micro-shards of 5 with
// --deterministic unless --micro-shard says otherwise.
func (c config) batch() ddp.Batch { return ddp.Batch{Global: c.batchSize, MicroShard: 5, Seed: c.seed} }

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
	model, err := w.Wrap(ctx, printing{Module: linear, rank: w.Rank, out: out}, c.batch())
	if err != nil {
		return res, err
	}
	defer model.Close()
	if res.Before, err = datasetLoss(ctx, linear, d, dataset); err != nil {
		return res, err
	}
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: c.lr})
	if err != nil {
		return res, err
	}
	feed, err := training.NewFeed(w, model, dataset.Len())
	if err != nil {
		return res, err
	}
	if feed.Note != "" && w.Rank == 0 {
		fmt.Fprintf(out, "note: %s\n", feed.Note)
	}
	loader, err := data.NewLoader(dataset, d, data.LoaderConfig{BatchSize: feed.Batch, Sampler: feed.Sampler})
	if err != nil {
		return res, err
	}
	loop, err := c.OpenLoop(ctx, w, feed, optim.Checkpoint{Model: model, Optimizer: opt}, out)
	if err != nil {
		return res, err
	}
	defer func() { err = loop.End(ctx, err) }()
	// lossOf is a batch's loss, saying what the model saw, as the seed.
	lossOf := func(b data.Batch) *xla.Tensor {
		output := model.Forward(b.Input)
		fmt.Fprintf(out, "rank %d: Outside: input size %v output_size %v\n", w.Rank, b.Input.Shape().Dimensions, output.Shape().Dimensions)
		return nn.MSELoss(output, b.Target, nn.ReductionMean)
	}
	curves := report.Curves{Title: "linear model"}
	for epoch := range loop.Epochs(ctx, c.epochs) {
		var mean epochMean
		for st, err := range loop.Steps(ctx, epoch, feed.Steps(loader.Epoch(ctx, epoch)), c.MaxSteps) {
			if err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			loss, err := feed.TrainStep(ctx, opt, st, loop.Position().Step, lossOf)
			if err != nil {
				return res, err
			}
			v, err := mean.add(ctx, loss, feed, st)
			if err != nil {
				return res, err
			}
			if steps := loop.Position().Step + 1; steps%c.LogInterval == 0 {
				curves.AddLoss(steps, v)
			}
		}
		res.EpochLosses = append(res.EpochLosses, mean.report(out, w.Rank, epoch, feed))
		if err := c.Export(ctx, loop, epoch); err != nil {
			return res, err
		}
	}
	return finish(ctx, c, w, linear, dataset, &curves, out, res)
}

// epochMean is the mean loss of an epoch's samples: rank 0's batches, or
// with --deterministic the global batches.
type epochMean struct {
	sum float64
	n   int
}

// add reads a step's loss into the mean and returns it.
func (m *epochMean) add(ctx context.Context, loss *xla.Tensor, feed *training.Feed, st training.Step) (float64, error) {
	v, err := loss.Item(ctx)
	size := feed.Global
	if !feed.Deterministic() {
		size = st.Batches[0].Size // rank 0's loss: its batch, maybe the epoch's partial last
	}
	m.sum, m.n = m.sum+v*float64(size), m.n+size
	return v, err
}

// report prints the epoch's mean on rank 0 and returns it.
func (m epochMean) report(out io.Writer, rank, epoch int, feed *training.Feed) float64 {
	mean := m.sum / float64(m.n)
	if m.n == 0 {
		if rank == 0 {
			fmt.Fprintf(out, "epoch %d: no step left to train (resumed at its end)\n", epoch+1)
		}
		return 0
	}
	if rank == 0 {
		whose := "rank 0's"
		if feed.Deterministic() {
			whose = "the global batches'"
		}
		fmt.Fprintf(out, "epoch %d: mean loss %.4f on %s %d samples\n", epoch+1, mean, whose, m.n)
	}
	return mean
}

// finish measures the trained model and prints rank 0's summary.
func finish(ctx context.Context, c config, w ddp.Worker, linear nn.Module, dataset *data.Random, curves *report.Curves, out io.Writer, res result) (result, error) {
	var err error
	if res.After, err = datasetLoss(ctx, linear, w.Device, dataset); err != nil {
		return res, err
	}
	digest, err := nn.WeightsDigest(ctx, linear)
	if err != nil || w.Rank != 0 {
		return res, err
	}
	fmt.Fprintf(out, "weights sha256 %s\n", digest)
	fmt.Fprintf(out, "loss over the %d samples: %.4f before training, %.4f after\n", dataset.Len(), res.Before, res.After)
	return res, c.Finish(out, curves)
}
