package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// lossOf is the seed's loss of a batch.
func lossOf(model nn.Module, b data.Batch) *xla.Tensor {
	return nn.NLLLoss(model.Forward(b.Input).LogSoftmax(1), b.Target, nn.ReductionMean)
}

// newOptimizer is the seed's Adadelta, sharded over the replicas with
// --zero, and its StepLR.
func newOptimizer(ctx context.Context, c config, model *ddp.DistributedDataParallel) (optim.Optimizer, optim.Scheduler, error) {
	adadelta := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
		return optim.NewAdadelta(groups[0].Params, optim.AdadeltaConfig{LR: c.lr})
	}
	var opt optim.Optimizer
	var err error
	if c.zero {
		opt, err = zero.New(ctx, model, nil, adadelta)
	} else {
		opt, err = adadelta([]optim.ParamGroup{{Params: nn.Parameters(model)}})
	}
	if err != nil {
		return nil, nil, err
	}
	sched, err := optim.NewStepLR(opt, 1, c.gamma)
	return opt, sched, err
}

// runReport is what a replica measures and rank 0 prints: the split of
// each step's time, the progress line, the curves and the last loss.
type runReport struct {
	rank0    bool
	out      io.Writer
	feed     *training.Feed
	loader   *data.Loader
	split    *report.StepSplit
	curves   report.Curves
	progress *report.Progress // rank 0's, of the current epoch
	start    time.Time
	// firstStep is the run's first step (a resume's): the speed counts
	// the steps run here.
	firstStep int
	total     int
	// readEvery is how many steps apart rank 0 reads the loss: 10, or
	// --log-interval when it asks for more lines; lastRead the step of
	// the epoch last read.
	readEvery, lastRead int
	loss                float64
	// epochLoss and runLoss: whether a loss was read in the epoch, at all.
	epochLoss, runLoss bool
}

func newRunReport(rank0 bool, out io.Writer, feed *training.Feed, loader *data.Loader, firstStep int) *runReport {
	return &runReport{rank0: rank0, out: out, feed: feed, loader: loader, split: report.NewStepSplit(),
		curves: report.Curves{Title: "MNIST CNN"}, start: time.Now(), firstStep: firstStep}
}

func (r *runReport) startEpoch(epoch int, c config, feed *training.Feed, resumed int) {
	r.total = feed.StepsPerEpoch
	if c.MaxSteps > 0 {
		r.total = min(r.total, c.MaxSteps)
	}
	r.progress, r.epochLoss, r.lastRead = nil, false, resumed
	r.readEvery = min(10, c.LogInterval)
	if r.rank0 {
		r.progress = report.NewProgress(r.out, fmt.Sprintf("epoch %d/%d", epoch+1, c.epochs), r.total, c.LogInterval)
		r.progress.ResumedAt(resumed)
	}
	r.split.Start()
}

// stepDone charges a step's time: tracing, but for the programs and the
// crossing the feed measured.
func (r *runReport) stepDone(t training.StepTimes) {
	r.split.Lap("trace")
	r.split.Move("trace", "execute", t.Execute)
	r.split.Move("trace", "download", t.Download)
	r.split.Move("trace", "all-reduce", t.Exchange)
	r.split.Move("trace", "upload", t.Upload)
	r.split.EndStep()
}

// logLoss reads rank 0's loss every readEvery steps and at the epoch's
// last (step within the epoch, steps since the start): the step has run,
// so the read costs no program.
func (r *runReport) logLoss(ctx context.Context, loss *xla.Tensor, step, steps int) error {
	if !r.rank0 || (step%r.readEvery != 0 && step != r.total) {
		return nil
	}
	var err error
	if r.loss, err = loss.Item(ctx); err != nil {
		return err
	}
	r.epochLoss, r.runLoss = true, true
	r.curves.AddLoss(steps, r.loss)
	r.progress.Step(step, r.loss, (step-r.lastRead)*r.feed.Global)
	r.lastRead = step
	r.split.Lap("loss read")
	return nil
}

func (r *runReport) endEpoch(epoch, epochs int, accuracy, lr float64) {
	r.split.Stop()
	r.progress.Done()
	if !r.rank0 {
		return
	}
	r.curves.AddAccuracy(epoch+1, accuracy)
	fmt.Fprintf(r.out, "epoch %d: test accuracy %.2f%%, last loss %s, next lr %.4g\n", epoch+1, 100*accuracy, report.Loss(r.loss, r.epochLoss), lr)
	fmt.Fprintf(r.out, "time %s; the loader's workers assembled and uploaded each batch in %s, beside the steps\n",
		r.split, r.loader.Stats().Assemble/time.Duration(max(r.loader.Stats().Batches, 1)))
}

// finish fills in the run's result and prints rank 0's summary.
func (r *runReport) finish(ctx context.Context, c config, model *ddp.DistributedDataParallel, net nn.Module, loop *training.Loop, res result) (result, error) {
	res.Trained, res.Split, res.FinalLoss = time.Since(r.start), r.split, r.loss
	res.Samples = loop.Position().Step * r.feed.Global
	ranHere := (loop.Position().Step - r.firstStep) * r.feed.Global
	res.Compilations = xla.GetMetrics().Compilations
	var err error
	if res.Weights, err = nn.WeightsDigest(ctx, net); err != nil || !r.rank0 {
		return res, err
	}
	if st := model.DeterministicStats(); st.Steps > 0 {
		fmt.Fprintf(r.out, "deterministic exchange: %d bytes sent a step by this process\n", st.BytesSent/int64(st.Steps))
	}
	fmt.Fprintf(r.out, "weights sha256 %s\n", res.Weights)
	fmt.Fprintf(r.out, "done: %d epoch(s), test accuracy %.2f%%, final loss %s, %v training, %.0f samples/s, programs: %d compiled, %d from the disk cache\n",
		res.Epochs, 100*res.Accuracy, report.Loss(res.FinalLoss, r.runLoss), res.Trained.Round(time.Millisecond),
		float64(ranHere)/max(res.Trained.Seconds(), 1e-9), res.Compilations, xla.GetMetrics().PersistentCacheHits)
	return res, c.Finish(r.out, &r.curves)
}
