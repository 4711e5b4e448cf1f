// Command gpt trains a character-level GPT (nanoGPT's shakespeare_char
// recipe) data-parallel on a text corpus that is on the machine offline,
// Debian's fortunes: AdamW with decay groups, linear warmup and cosine
// decay, gradient clipping inside the step, gradient accumulation with one
// all-reduce per optimizer step, fp32 or bf16 compute with fp32 master
// weights, val loss every --eval-interval steps, checkpoints and --resume,
// and a generated sample at the end.
//
//	gpt --spawn --cpu-devices 2 --plot gpt.png          # a replica per device
//	ddprun --nproc_per_node=2 gpt --precision bf16      # one process per rank
//	gpt --size full --grad-accum 4 --clip 1.0           # 6 layers, 6 heads, 384 wide, block 256
//	ddprun --nproc_per_node=4 gpt --zero --checkpoint ck # AdamW state sharded over 4 ranks
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

type config struct {
	cmdline.Run
	launch                                  ddp.Options
	model                                   nn.GPTConfig
	size, precision, data, sampleLog        string
	zero                                    bool
	steps, batchSize, gradAccum             int
	warmup, evalInterval, evalIters, sample int
	lr, minLR, weightDecay, clip            float64
	seed                                    uint64
}

// sizes are the presets: small learns visibly in a couple of CPU minutes;
// full is nanoGPT's shakespeare_char.
var sizes = map[string]struct {
	model                      nn.GPTConfig
	steps, batch, warmup, eval int
}{
	"small": {nn.GPTConfig{BlockSize: 64, Layers: 4, Heads: 4, Width: 128}, 600, 32, 50, 100},
	"full":  {nn.GPTConfig{BlockSize: 256, Layers: 6, Heads: 6, Width: 384, Dropout: 0.2}, 5000, 64, 100, 250},
}

// result is what rank 0 measured.
type result struct {
	TrainLoss, ValLoss float64
	// Losses are (step, train loss) pairs every --log-interval steps.
	Losses [][2]float64
	// ValLosses are (step, val loss) pairs in order.
	ValLosses     [][2]float64
	Steps         int
	ResumedAt     int
	Trained       time.Duration
	TokensPerSec  float64
	Compilations  int64
	GradientSyncs int
	Sample        string
}

func main() {
	cmdline.Main("gpt", func(ctx context.Context, args []string, out io.Writer) error {
		_, err := run(ctx, args, out)
		return err
	})
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs, launch := cmdline.FlagSet("gpt", out)
	fs.StringVar(&c.size, "size", "small", "model and schedule preset: small (4 layers, 128 wide, block 64) or full (nanoGPT's shakespeare_char: 6 layers, 6 heads, 384 wide, block 256)")
	fs.IntVar(&c.model.Layers, "layers", 0, "transformer blocks (0: the preset's)")
	fs.IntVar(&c.model.Heads, "heads", 0, "attention heads (0: the preset's)")
	fs.IntVar(&c.model.Width, "width", 0, "embedding width (0: the preset's)")
	fs.IntVar(&c.model.BlockSize, "block", 0, "context length in characters (0: the preset's)")
	fs.Float64Var(&c.model.Dropout, "dropout", -1, "dropout (-1: the preset's)")
	fs.IntVar(&c.steps, "steps", 0, "optimizer steps (0: the preset's)")
	fs.IntVar(&c.batchSize, "batch-size", 0, "global batch per optimizer step, split over the replicas and the --grad-accum micro-steps (0: the preset's)")
	fs.IntVar(&c.gradAccum, "grad-accum", 1, "micro-steps per optimizer step: gradients accumulate locally, one all-reduce per step. It splits --batch-size, which stays the batch of one optimizer step (nanoGPT's gradient_accumulation_steps multiplies its batch_size instead: give --batch-size its batch_size × steps)")
	fs.StringVar(&c.precision, "precision", "fp32", "compute precision: fp32, or bf16 (matmuls and activations in bf16; master weights, optimizer state, norms, softmax and the loss in fp32)")
	fs.Float64Var(&c.lr, "lr", 1e-3, "peak AdamW learning rate")
	fs.Float64Var(&c.minLR, "min-lr", 1e-4, "learning rate at the end of the cosine decay")
	fs.IntVar(&c.warmup, "warmup", -1, "linear warmup steps (-1: the preset's)")
	fs.Float64Var(&c.weightDecay, "weight-decay", 0.1, "AdamW weight decay of the matrices and embeddings (none for biases and norms)")
	fs.Float64Var(&c.clip, "clip", 1.0, "clip the gradients' global 2-norm to this (0: no clipping)")
	fs.IntVar(&c.evalInterval, "eval-interval", 0, "steps between val-loss estimates and checkpoints (0: the preset's)")
	fs.IntVar(&c.evalIters, "eval-iters", 10, "batches per val-loss estimate")
	fs.BoolVar(&c.zero, "zero", false, "shard the AdamW state and the fp32 master weights over the replicas (ZeRO-1, package ddp/zero); --checkpoint is then a directory, resumable at any replica count")
	fs.IntVar(&c.sample, "sample", 400, "characters to generate at the end (0: none)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the initial model, the batches and the sample")
	fs.StringVar(&c.data, "data", DefaultCorpus, "a UTF-8 text file, or a directory of fortune files")
	fs.StringVar(&c.sampleLog, "sample-log", "", "append the index of every training window each replica uses to DIR/replica-N.txt (\"epoch index\" lines)")
	addRunFlags(fs, &c.Run)
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	// The settings a resume from --checkpoint-dir must keep (or name
	// in --resume-override).
	if err := launch.Checkpoints.Record(fs, "size", "layers", "heads", "width", "block", "dropout", "batch-size", "grad-accum", "precision", "lr", "min-lr", "warmup", "weight-decay", "clip", "seed"); err != nil {
		return c, err
	}
	c.launch = *launch
	if err := c.applyPreset(); err != nil {
		return c, err
	}
	if err := c.CheckCheckpointKind(c.zero); err != nil {
		return c, err
	}
	return c, c.Check(c.launch)
}

// addRunFlags adds the shared output flags; a GPT counts steps, not epochs.
func addRunFlags(fs *pflag.FlagSet, r *cmdline.Run) {
	fs.IntVar(&r.LogInterval, "log-interval", 10, "steps between loss readings (progress lines without a terminal)")
	fs.StringVar(&r.Checkpoint, "checkpoint", "", "save a checkpoint here at each val-loss estimate and at the end: a safetensors file from rank 0, or with --zero a directory of every replica's shard")
	fs.BoolVar(&r.Resume, "resume", false, "continue from --checkpoint")
	fs.BoolVar(&r.Metrics, "metrics", false, "print xla.MetricsReport() at the end")
	fs.StringVar(&r.Plot, "plot", "", "draw the train and val loss curves to this PNG file")
}

func (c *config) applyPreset() error {
	p, ok := sizes[c.size]
	if !ok {
		return fmt.Errorf("--size %q: want small or full", c.size)
	}
	orPreset := func(v *int, preset int) {
		if *v == 0 {
			*v = preset
		}
	}
	orPreset(&c.model.Layers, p.model.Layers)
	orPreset(&c.model.Heads, p.model.Heads)
	orPreset(&c.model.Width, p.model.Width)
	orPreset(&c.model.BlockSize, p.model.BlockSize)
	orPreset(&c.steps, p.steps)
	orPreset(&c.batchSize, p.batch)
	orPreset(&c.evalInterval, p.eval)
	if c.model.Dropout == -1 {
		c.model.Dropout = p.model.Dropout
	}
	if c.warmup == -1 {
		c.warmup = min(p.warmup, c.steps-1)
	}
	switch {
	case c.model.Layers < 1 || c.model.Heads < 1 || c.model.Width < 1 || c.model.BlockSize < 1 || c.model.Width%c.model.Heads != 0:
		return fmt.Errorf("--layers %d, --heads %d, --width %d, --block %d: must be positive, the width a multiple of the heads",
			c.model.Layers, c.model.Heads, c.model.Width, c.model.BlockSize)
	case c.steps < 1 || c.batchSize < 1 || c.gradAccum < 1 || c.evalInterval < 1 || c.evalIters < 1 || c.LogInterval < 1 || c.sample < 0:
		return errors.New("--steps, --batch-size, --grad-accum, --eval-interval, --eval-iters and --log-interval must be positive, --sample >= 0")
	case !(c.model.Dropout >= 0 && c.model.Dropout < 1):
		return fmt.Errorf("--dropout %g: must be in [0, 1)", c.model.Dropout)
	case !(c.lr > 0) || !(c.minLR >= 0 && c.minLR <= c.lr) || !(c.weightDecay >= 0) || !(c.clip >= 0):
		return fmt.Errorf("--lr %g must be positive, --min-lr %g in [0, lr], --weight-decay %g and --clip %g >= 0", c.lr, c.minLR, c.weightDecay, c.clip)
	case c.warmup < 0 || c.warmup >= c.steps:
		return fmt.Errorf("--warmup %d: must be from 0 to --steps - 1 (%d)", c.warmup, c.steps-1)
	case c.precision != "fp32" && c.precision != "bf16":
		return fmt.Errorf("--precision %q: want fp32 or bf16", c.precision)
	case c.launch.Mode.CheckBatch(c.batch()) != nil:
		return c.launch.Mode.CheckBatch(c.batch())
	case c.launch.Mode.Deterministic && c.gradAccum != 1:
		return fmt.Errorf("--grad-accum %d with --deterministic: the micro-shards are the accumulation (each replica runs its "+
			"--batch-size / --micro-shard share of them one after the other); drop --grad-accum", c.gradAccum)
	}
	return nil
}

// batch is the global batch, cut into micro-shards of 8 rows with
// --deterministic unless --micro-shard says otherwise.
func (c config) batch() ddp.Batch { return ddp.Batch{Global: c.batchSize, MicroShard: 8, Seed: c.seed} }

// computeDType is --precision's compute dtype (InvalidDType: the
// parameters' own).
func (c config) computeDType() xla.DType {
	if c.precision == "bf16" {
		return xla.BFloat16
	}
	return xla.InvalidDType
}

func run(ctx context.Context, args []string, out io.Writer) (result, error) {
	c, err := parse(args, out)
	if err != nil {
		return result{}, err
	}
	text, err := loadCorpus(ctx, c.data)
	if err != nil {
		return result{}, err
	}
	c.model.Vocab = len(text.vocab)
	for _, split := range [][]int32{text.train, text.val} {
		if len(split) <= c.model.BlockSize {
			return result{}, fmt.Errorf("--data %s: a split has %d characters, not more than --block %d: use a smaller block or more text",
				c.data, len(split), c.model.BlockSize)
		}
	}
	if err := fitsInMemory(c.model, "/proc/meminfo"); err != nil {
		return result{}, err
	}
	xla.ResetMetrics() // this run's counts
	var res result
	err = ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error {
		r, err := train(ctx, c, w, text, out)
		if w.Rank == 0 {
			res = r
		}
		return err
	}, c.launch)
	return res, err
}

// fitsInMemory refuses a model whose weights, gradients and AdamW state
// (16 bytes a parameter) outgrow the machine's memory (MemTotal of
// meminfo; no check where it cannot be read): the Go runtime would die
// allocating them instead of saying which flag to lower.
func fitsInMemory(model nn.GPTConfig, meminfo string) error {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(line, "MemTotal: %g kB", &kb); err == nil {
			if need := 16 * model.Parameters(); need > kb*1024 {
				return fmt.Errorf("a GPT of %.3g parameters needs %.3g GiB for its weights, gradients and AdamW state; this machine has %.3g GiB: lower --layers, --width or --block",
					model.Parameters(), need/(1<<30), kb/(1<<20))
			}
			return nil
		}
	}
	return nil
}
