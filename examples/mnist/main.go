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
	"log/slog"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/zero"
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
	det                              cmdline.Determinism
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
	c.det.AddFlags(fs, 16)
	fs.StringVar(&c.sampleLog, "sample-log", "", "append the index of every training sample each replica uses to DIR/replica-N.txt (\"epoch index\" lines)")
	fs.StringVar(&c.dataDir, "data", data.DefaultMNISTDir(), "directory with MNIST-format idx files (make deps installs MNIST; Fashion-MNIST works)")
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	c.launch, c.Preemption = *launch, cmdline.Preemption(launch.Checkpoints)
	c.launch.Device.Deterministic = c.det.On
	switch {
	case c.epochs < 1 || c.batchSize < 1 || c.testBatchSize < 1 || c.LogInterval < 1:
		return c, errors.New("--epochs, --batch-size, --test-batch-size and --log-interval must be positive")
	case !(c.lr > 0) || !(c.gamma > 0 && c.gamma <= 1):
		return c, fmt.Errorf("--lr=%g must be positive and --gamma=%g in (0, 1]", c.lr, c.gamma)
	}
	if err := c.CheckCheckpointKind(c.zero); err != nil {
		return c, err
	}
	if err := c.det.Check(c.batchSize); err != nil {
		return c, err
	}
	return c, c.Check()
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
	log := slog.With("rank", w.Rank)
	net, err := nn.NewMNISTNet(d, nn.NewRand(c.seed))
	if err != nil {
		return res, err
	}
	model, err := ddp.Wrap(ctx, net, c.det.WrapOptions(c.batchSize, c.seed)...)
	if err != nil {
		return res, err
	}
	defer model.Close()
	feed, err := cmdline.NewGlobalFeed(out, w, model, trainSet.Len(), c.batchSize, c.seed, fmt.Sprintf("%d replicas", w.WorldSize))
	if err != nil {
		return res, err
	}
	perReplica := feed.Batch
	adadelta := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
		return optim.NewAdadelta(groups[0].Params, optim.AdadeltaConfig{LR: c.lr})
	}
	var opt optim.Optimizer
	var sharded *zero.ZeroRedundancyOptimizer
	if c.zero {
		sharded, err = zero.New(ctx, model, nil, adadelta)
		opt = sharded
	} else {
		opt, err = adadelta([]optim.ParamGroup{{Params: nn.Parameters(model)}})
	}
	if err != nil {
		return res, err
	}
	hostStats := model.HostPathStats
	if sharded != nil {
		hostStats = sharded.HostPathStats
	}
	sched, err := optim.NewStepLR(opt, 1, c.gamma)
	if err != nil {
		return res, err
	}
	stepsPerEpoch := feed.StepsPerEpoch
	state := optim.Checkpoint{Model: model, Optimizer: opt, RNG: d}
	resumer, at, resumed, err := c.Open(ctx, &state, w.WorldSize, perReplica, rank0, out)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, resumer.Close()) }()
	switch {
	case resumed:
		if err := c.det.CheckResumed(state.Metadata, c.batchSize, "--checkpoint-dir "+c.Dir); err != nil {
			return res, err
		}
		if err := feed.ResumeAt(at.Epoch, at.Samples); err != nil {
			return res, err
		}
		res.ResumedAt = at.Epoch
	case c.Resume:
		if err := checkpoint.Load(ctx, c.Checkpoint, &state); err != nil {
			return res, err
		}
		if err := c.det.CheckResumed(state.Metadata, c.batchSize, "--checkpoint "+c.Checkpoint); err != nil {
			return res, err
		}
		at = cmdline.Position{Epoch: state.Epoch, Step: state.Step}
		res.ResumedAt = state.Epoch
		log.Info("resumed", "checkpoint", c.Checkpoint, "epoch", state.Epoch)
	}
	state.Metadata = c.det.Mark(state.Metadata, c.batchSize)
	for range at.Epoch {
		sched.Step() // the learning rate of the epoch it resumes at
	}
	loader, err := data.NewLoader(trainSet, d, data.LoaderConfig{BatchSize: perReplica, DropLast: true, Sampler: feed.Sampler})
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
	curves := report.Curves{Title: "MNIST CNN"}
	start, steps := time.Now(), at.Step
	split := report.NewStepSplit()
	var (
		logged   loggedLoss
		progress *report.Progress // rank 0's, of the current epoch
	)
	var epochLoss, runLoss bool // whether this run read a loss in the epoch, at all
	readLoss := func(l loggedLoss) (err error) {
		if res.FinalLoss, err = l.loss.Item(ctx); err != nil {
			return err
		}
		epochLoss, runLoss = true, true
		curves.AddLoss(l.steps, res.FinalLoss)
		progress.Step(l.step, res.FinalLoss, 10*feed.Global)
		return nil
	}
	for epoch := at.Epoch; epoch < c.epochs; epoch++ {
		nn.Train(model)
		// The samples of the epoch's order used before a resume, and
		// the steps they made: the loader yields the rest.
		epochStart := at.Used(epoch)
		before := epochStart / feed.Global
		total := stepsPerEpoch
		if c.MaxSteps > 0 {
			total = min(total, c.MaxSteps)
		}
		progress, epochLoss = nil, false
		if rank0 {
			progress = report.NewProgress(out, fmt.Sprintf("epoch %d/%d", epoch+1, c.epochs), total, c.LogInterval)
		}
		split.Start()
		for st, err := range feed.Steps(loader.Epoch(ctx, epoch)) {
			if err != nil {
				return res, err
			}
			index := before + st.Index // within the epoch
			if index >= total {
				break
			}
			split.Lap("data")
			var loss *xla.Tensor
			if model.Deterministic() {
				loss, err = deterministicStep(ctx, split, model, opt, st.Batches, steps)
			} else {
				opt.ZeroGrad()
				loss = lossOf(model, st.Batches[0])
				err = step(ctx, split, hostStats, loss, opt)
			}
			if err != nil {
				return res, err
			}
			steps++
			for _, b := range feed.Real(st.Batches) {
				if err := samples.Add(epoch, b.Samples); err != nil {
					return res, err
				}
			}
			at = cmdline.Position{Epoch: epoch, Samples: epochStart + (st.Index+1)*feed.Global, Step: steps}
			if err := resumer.Step(ctx, state, at); err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			// The loss logged is read one step late, once the next step is
			// on its way: reading it at once would wait for its program
			// where execution runs behind the host (replicas in-graph).
			if logged.loss != nil {
				if err := readLoss(logged); err != nil {
					return res, err
				}
				split.Lap("loss read")
			}
			logged = loggedLoss{}
			// A deterministic step's loss is formed in the next program:
			// every replica keeps its own, so that program is the same
			// on all of them, and reads it once computed.
			if step := index + 1; (rank0 || model.Deterministic()) && (step%10 == 0 || step == total) {
				logged = loggedLoss{loss: loss, step: step, steps: steps}
			}
			split.EndStep()
		}
		if logged.loss != nil {
			if model.Deterministic() {
				if err := d.MarkStep(ctx); err != nil {
					return res, err
				}
			}
			if err := readLoss(logged); err != nil {
				return res, err
			}
			logged = loggedLoss{}
		}
		split.Stop()
		progress.Done()
		sched.Step()
		if res.Accuracy, err = report.Accuracy(ctx, net, d, testSet, c.testBatchSize); err != nil {
			return res, err
		}
		res.Epochs = epoch + 1
		if rank0 {
			curves.AddAccuracy(epoch+1, res.Accuracy)
			fmt.Fprintf(out, "epoch %d: test accuracy %.2f%%, last loss %s, next lr %.4g\n", epoch+1, 100*res.Accuracy, report.Loss(res.FinalLoss, epochLoss), opt.LR())
			fmt.Fprintf(out, "time %s; the loader's workers assembled and uploaded each batch in %s, beside the steps\n",
				split, loader.Stats().Assemble/time.Duration(max(loader.Stats().Batches, 1)))
		}
		if c.Checkpoint != "" {
			saved := state
			saved.Epoch, saved.Step = epoch+1, steps
			if err := checkpoint.Save(ctx, c.Checkpoint, saved); err != nil {
				return res, err
			}
		}
	}
	res.Trained = time.Since(start)
	res.Split = split
	res.Samples = steps * feed.Global
	res.Compilations = xla.GetMetrics().Compilations
	if res.Weights, err = cmdline.WeightsDigest(ctx, net); err != nil {
		return res, err
	}
	if rank0 {
		if st := model.DeterministicStats(); st.Steps > 0 {
			fmt.Fprintf(out, "deterministic exchange: %d bytes sent a step by this process\n", st.BytesSent/int64(st.Steps))
		}
		fmt.Fprintf(out, "weights sha256 %s\n", res.Weights)
		fmt.Fprintf(out, "done: %d epoch(s), test accuracy %.2f%%, final loss %s, %v training, %.0f samples/s, programs: %d compiled, %d from the disk cache\n",
			res.Epochs, 100*res.Accuracy, report.Loss(res.FinalLoss, runLoss), res.Trained.Round(time.Millisecond),
			float64(res.Samples)/max(res.Trained.Seconds(), 1e-9), res.Compilations, xla.GetMetrics().PersistentCacheHits)
		if err := c.Finish(out, &curves); err != nil {
			return res, err
		}
	}
	return res, nil
}

// loggedLoss is a step's loss kept for the progress line: step within the
// epoch, steps since the start.
type loggedLoss struct {
	loss        *xla.Tensor
	step, steps int
}

// step computes the gradients, averages them across the replicas and
// updates the parameters (optim.BackwardStep), charging the split. On the
// host path the backward pass ends in the forward+backward program,
// download, all-reduce and upload, and the optimizer update stays lazy:
// it is traced into the next step's program (one program a step, not
// two: 8% of the seed's step), or run by whatever reads the parameters
// first (a checkpoint, the test). Where the replicas average in-graph,
// the one program runs at MarkStep.
func step(ctx context.Context, split *report.StepSplit, hostStats func() ddp.HostPathStats, loss *xla.Tensor, opt optim.Optimizer) error {
	before := hostStats()
	if err := loss.Backward(); err != nil {
		return err
	}
	if err := opt.Step(); err != nil {
		return err
	}
	return finishStep(ctx, split, before, hostStats(), loss.Device())
}

// finishStep charges a traced step's host work to the split (the time
// since the last lap was tracing but for what the host path measured),
// and runs the step's program unless the host path ran it.
func finishStep(ctx context.Context, split *report.StepSplit, before, after ddp.HostPathStats, d *xla.Device) error {
	split.Lap("trace")
	split.Move("trace", "execute", after.Execute-before.Execute)
	split.Move("trace", "download", after.Download-before.Download)
	split.Move("trace", "all-reduce", after.AllReduce-before.AllReduce)
	split.Move("trace", "upload", after.Upload-before.Upload)
	if after.Steps > before.Steps {
		return nil
	}
	if err := d.MarkStep(ctx); err != nil {
		return err
	}
	split.Lap("execute")
	return nil
}
