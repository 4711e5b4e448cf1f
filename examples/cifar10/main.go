// Command cifar10 is the HPC DDP tutorial: ResNet-18 on CIFAR-10 with a
// DistributedSampler, RandomCrop(32, padding 4) and RandomHorizontalFlip,
// and a Trainer holding the local and global rank. --no-ddp trains one
// process on one device, so the tutorial's comparison of total training
// time can be made:
//
//	cifar10 --no-ddp --epochs 1
//	ddprun --nproc_per_node=2 cifar10 --epochs 1
//
// With --deterministic (--batch-size then being the global batch) the
// trained weights and BatchNorm statistics are the same bits at any world
// size (docs/deterministic.md).
//
// Without the binary CIFAR-10 batches in --data it says where to put them
// and trains on synthetic data of the same shape (--synthetic forces it).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
)

type config struct {
	cmdline.Run
	launch            ddp.Options
	epochs, batchSize int
	lr                float64
	seed              uint64
	dataDir           string
	synthetic, noDDP  bool
	syntheticN        int
}

// result is rank 0's view of the run.
type result struct {
	Accuracy, FinalLoss float64
	Total               time.Duration
	Weights             string // the sha256 of the trained parameters and buffers
	Synthetic           bool
	ResumedAt           int
}

func main() {
	cmdline.Main("cifar10", func(ctx context.Context, args []string, out io.Writer) error {
		_, err := run(ctx, args, out)
		return err
	})
}

func defaultDataDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return "cifar-10-batches-bin"
	}
	return filepath.Join(home, ".cache", "xladdp", "data", "cifar-10-batches-bin")
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs, launch := cmdline.FlagSet("cifar10", out)
	fs.IntVar(&c.epochs, "epochs", 1, "epochs to train")
	fs.IntVar(&c.batchSize, "batch-size", 32, "batch size per replica (with --deterministic, the global batch)")
	fs.Float64Var(&c.lr, "lr", 0.01, "SGD learning rate (momentum 0.9)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the initial model, the augmentation and the data order")
	c.Run.AddFlags(fs, 20)
	fs.StringVar(&c.dataDir, "data", defaultDataDir(), "directory with CIFAR-10's binary batches (data_batch_1.bin ... test_batch.bin)")
	fs.BoolVar(&c.synthetic, "synthetic", false, "train on synthetic CIFAR-shaped data")
	fs.IntVar(&c.syntheticN, "synthetic-samples", 50000, "training samples of the synthetic data (a fifth as many for testing)")
	fs.BoolVar(&c.noDDP, "no-ddp", false, "the tutorial's baseline: one process, one device, no DDP")
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	// The settings a resume from --checkpoint-dir must keep (or name
	// in --resume-override).
	if err := launch.Checkpoints.Record(fs, "batch-size", "lr", "seed"); err != nil {
		return c, err
	}
	c.launch = *launch
	switch {
	case c.epochs < 1 || c.batchSize < 1 || c.LogInterval < 1 || c.syntheticN < 1:
		return c, errors.New("--epochs, --batch-size, --log-interval and --synthetic-samples must be positive")
	case !(c.lr > 0):
		return c, fmt.Errorf("--lr=%g: must be positive", c.lr)
	case c.noDDP && c.launch.Spawn:
		return c, errors.New("--no-ddp trains one process on one device: leave out --spawn")
	case c.noDDP && c.launch.Mode.Deterministic:
		return c, errors.New("--deterministic cuts the global batch over DDP's replicas: leave out --no-ddp (one replica is --spawn --cpu-devices 1)")
	}
	if err := c.launch.Mode.CheckBatch(c.batch(1)); err != nil {
		return c, err
	}
	if err := c.CheckCheckpointKind(false); err != nil {
		return c, err
	}
	return c, c.Check(c.launch)
}

// batch is the global batch of a job of replicas: --batch-size per
// replica (cmdline.TutorialBatch), micro-shards of 8 by default.
func (c config) batch(replicas int) ddp.Batch {
	return cmdline.TutorialBatch(c.launch.Mode, c.batchSize, replicas, 8, c.seed)
}

// datasets opens CIFAR-10, or the synthetic stand-in when asked or when
// the batches are missing (saying where they go).
func datasets(c config, out io.Writer) (train, test data.Dataset, synthetic bool, err error) {
	if !c.synthetic {
		tr, err1 := data.NewCIFAR10(c.dataDir, true)
		te, err2 := data.NewCIFAR10(c.dataDir, false)
		if err := errors.Join(err1, err2); err == nil {
			pad := [3]float32{}
			for i := range pad {
				pad[i] = -tr.Mean[i] / tr.Std[i]
			}
			return &augmented{Dataset: tr, pad: pad, seed: c.seed}, te, false, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, nil, false, err
		}
		fmt.Fprintf(out, "CIFAR-10 is not in %s: put the binary version's data_batch_1.bin ... data_batch_5.bin and test_batch.bin there "+
			"(from cifar-10-binary.tar.gz) or pass --data DIR; training on synthetic data of the same shape\n", c.dataDir)
	}
	return &augmented{Dataset: newSynthetic(c.syntheticN, c.seed), seed: c.seed}, newSynthetic(max(c.syntheticN/5, 100), c.seed+1), true, nil
}

func run(ctx context.Context, args []string, out io.Writer) (result, error) {
	c, err := parse(args, out)
	if err != nil {
		return result{}, err
	}
	trainSet, testSet, synthetic, err := datasets(c, out)
	if err != nil {
		return result{}, err
	}
	xla.ResetMetrics()
	var res result
	fn := func(ctx context.Context, w ddp.Worker) error {
		t, err := newTrainer(ctx, c, w, trainSet, testSet, out)
		if err != nil {
			return err
		}
		r, err := t.train(ctx)
		if w.Rank == 0 {
			res = r
		}
		return err
	}
	if c.noDDP {
		err = single(ctx, c.launch.Device, fn)
	} else {
		err = ddp.Run(ctx, fn, c.launch)
	}
	res.Synthetic = synthetic
	return res, err
}

// single runs fn on one device of one process, without a process group.
func single(ctx context.Context, bo backend.Options, fn func(context.Context, ddp.Worker) error) error {
	b, err := backend.Open(ctx, bo)
	if err != nil {
		return err
	}
	e := xla.NewEngine(b)
	defer e.Close()
	return fn(ctx, ddp.Worker{Rank: 0, WorldSize: 1, LocalRank: 0, Device: e.Device(0)})
}
