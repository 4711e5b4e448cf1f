// Command mnist is the smdistributed.dataparallel MNIST example in Go: the
// PyTorch MNIST CNN trained with Adadelta (lr 1.0) and StepLR (gamma 0.7),
// the global batch split over the replicas, a DistributedSampler, test
// accuracy after each epoch, a checkpoint on rank 0 and --resume.
//
//	mnist --spawn --epochs 1 --plot mnist.png        # a replica per device, one process
//	ddprun --nproc_per_node=2 mnist --epochs 1       # one process per rank
//	ddprun --nproc_per_node=4 mnist --zero --checkpoint ck  # Adadelta state sharded over 4 ranks
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

type config struct {
	cmdline.Run
	launch                           ddp.Options
	epochs, batchSize, testBatchSize int
	lr, gamma                        float64
	seed                             uint64
	dataDir, sampleLog               string
	zero                             bool
}

// result is what rank 0 measured.
type result struct {
	Accuracy     float64
	FinalLoss    float64
	Epochs       int
	Samples      int
	Trained      time.Duration
	Compilations int64
	ResumedAt    int
	// Split is where rank 0's steps spent their time.
	Split *report.StepSplit
	// Weights is the sha256 of the trained parameters.
	Weights string
}

func main() {
	cmdline.Main("mnist", func(ctx context.Context, args []string, out io.Writer) error {
		_, err := run(ctx, args, out)
		return err
	})
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs, launch := cmdline.FlagSet("mnist", out)
	fs.IntVar(&c.epochs, "epochs", 1, "epochs to train")
	fs.IntVar(&c.batchSize, "batch-size", 64, "global batch size, split over the replicas (the seed's rule)")
	fs.IntVar(&c.testBatchSize, "test-batch-size", 1000, "batch size for testing")
	fs.Float64Var(&c.lr, "lr", 1.0, "Adadelta learning rate")
	fs.Float64Var(&c.gamma, "gamma", 0.7, "StepLR's learning-rate decay per epoch")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the initial model and the data order")
	fs.BoolVar(&c.zero, "zero", false, "shard the Adadelta state over the replicas (ZeRO-1, package ddp/zero); --checkpoint is then a directory, resumable at any replica count")
	c.Run.AddFlags(fs, 50)
	fs.StringVar(&c.sampleLog, "sample-log", "", "append the index of every training sample each replica uses to DIR/replica-N.txt (\"epoch index\" lines)")
	fs.StringVar(&c.dataDir, "data", data.DefaultMNISTDir(), "directory with MNIST-format idx files (make deps installs MNIST; Fashion-MNIST works)")
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	// The settings a resume from --checkpoint-dir must keep (or name
	// in --resume-override).
	if err := launch.Checkpoints.Record(fs, "batch-size", "lr", "gamma", "seed"); err != nil {
		return c, err
	}
	c.launch = *launch
	switch {
	case c.epochs < 1 || c.batchSize < 1 || c.testBatchSize < 1 || c.LogInterval < 1:
		return c, errors.New("--epochs, --batch-size, --test-batch-size and --log-interval must be positive")
	case !(c.lr > 0) || !(c.gamma > 0 && c.gamma <= 1):
		return c, fmt.Errorf("--lr=%g must be positive and --gamma=%g in (0, 1]", c.lr, c.gamma)
	}
	if err := c.launch.Mode.CheckBatch(c.batch()); err != nil {
		return c, err
	}
	if err := c.CheckCheckpointKind(c.zero); err != nil {
		return c, err
	}
	return c, c.Check(c.launch)
}

// batch is the global batch, cut into micro-shards of 16 with
// --deterministic unless --micro-shard says otherwise.
func (c config) batch() ddp.Batch {
	return ddp.Batch{Global: c.batchSize, MicroShard: 16, Seed: c.seed}
}

func run(ctx context.Context, args []string, out io.Writer) (result, error) {
	c, err := parse(args, out)
	if err != nil {
		return result{}, err
	}
	trainSet, err := data.NewMNIST(c.dataDir, true)
	if err != nil {
		return result{}, err
	}
	testSet, err := data.NewMNIST(c.dataDir, false)
	if err != nil {
		return result{}, err
	}
	xla.ResetMetrics() // this run's counts
	var res result
	err = ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error {
		r, err := train(ctx, c, w, trainSet, testSet, out)
		if w.Rank == 0 {
			res = r
		}
		return err
	}, c.launch)
	return res, err
}

// train is one replica's run; rank 0 reports.
func train(ctx context.Context, c config, w ddp.Worker, trainSet, testSet *data.MNIST, out io.Writer) (res result, err error) {
	d, rank0 := w.Device, w.Rank == 0
	net, err := nn.NewMNISTNet(d, nn.NewRand(c.seed))
	if err != nil {
		return res, err
	}
	model, err := w.Wrap(ctx, net, c.batch())
	if err != nil {
		return res, err
	}
	defer model.Close()
	feed, err := training.NewFeed(w, model, trainSet.Len())
	if err != nil {
		return res, err
	}
	opt, sched, err := newOptimizer(ctx, c, model)
	if err != nil {
		return res, err
	}
	loop, err := c.OpenLoop(ctx, w, feed, optim.Checkpoint{Model: model, Optimizer: opt, RNG: d}, out)
	if err != nil {
		return res, err
	}
	defer func() { err = loop.End(ctx, err) }()
	res.ResumedAt = loop.Position().Epoch
	for range res.ResumedAt {
		sched.Step() // the learning rate of the epoch it resumes at
	}
	loader, err := data.NewLoader(trainSet, d, data.LoaderConfig{BatchSize: feed.Batch, DropLast: true, Sampler: feed.Sampler})
	if err != nil {
		return res, err
	}
	samples, err := cmdline.OpenSampleLog(c.sampleLog, w.Rank)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, samples.Close()) }()
	if rank0 {
		fmt.Fprintf(out, "training the MNIST CNN on %d replicas (%s), %s, Adadelta lr %.4g, StepLR gamma %g\n",
			w.WorldSize, d, feed, opt.LR(), c.gamma)
	}
	run := newRunReport(rank0, out, feed, loader, loop.Position().Step)
	for epoch := range loop.Epochs(ctx, c.epochs) {
		nn.Train(model)
		run.startEpoch(epoch, c, feed, loop.Position().Samples/feed.Global)
		for st, err := range loop.Steps(ctx, epoch, feed.Steps(loader.Epoch(ctx, epoch)), c.MaxSteps) {
			if err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			run.split.Lap("data")
			loss, err := feed.TrainStep(ctx, opt, st, loop.Position().Step, func(b data.Batch) *xla.Tensor { return lossOf(model, b) })
			if err != nil {
				return res, err
			}
			run.stepDone(feed.LastStep())
			if err := samples.AddAll(epoch, feed.Real(st.Batches)); err != nil {
				return res, err
			}
			if err := run.logLoss(ctx, loss, st.Index+1, loop.Position().Step+1); err != nil {
				return res, err
			}
		}
		sched.Step()
		if res.Accuracy, err = report.Accuracy(ctx, net, d, testSet, c.testBatchSize); err != nil {
			return res, err
		}
		res.Epochs = epoch + 1
		run.endEpoch(epoch, c.epochs, res.Accuracy, opt.LR())
		if err := c.Export(ctx, loop, epoch); err != nil {
			return res, err
		}
	}
	return run.finish(ctx, c, model, net, loop, res)
}
