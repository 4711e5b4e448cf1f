package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// Trainer is the tutorial's: the model on this replica's device, its
// local and global rank, and what one epoch needs.
type Trainer struct {
	localRank, globalRank, worldSize int
	cfg                              config
	device                           *xla.Device
	net                              nn.Module
	model                            nn.Module // net, wrapped by DDP unless --no-ddp
	opt                              optim.Optimizer
	feed                             *training.Feed
	loader                           *data.Loader
	testSet                          data.Dataset
	loop                             *training.Loop
	out                              io.Writer
	close                            func()
}

func newTrainer(ctx context.Context, c config, w ddp.Worker, trainSet, testSet data.Dataset, out io.Writer) (t *Trainer, err error) {
	t = &Trainer{localRank: w.LocalRank, globalRank: w.Rank, worldSize: w.WorldSize, cfg: c, device: w.Device, testSet: testSet,
		out: out, close: func() {}}
	net, err := nn.NewResNet18(w.Device, nn.NewRand(c.seed), nn.ResNetConfig{NumClasses: 10, CIFAR: true})
	if err != nil {
		return nil, err
	}
	t.net, t.model = net, net
	if c.noDDP {
		t.feed, err = training.NewLocalFeed(trainSet.Len(), c.batch(1))
	} else {
		var m *ddp.DistributedDataParallel
		if m, err = w.Wrap(ctx, net, c.batch(w.WorldSize)); err != nil {
			return nil, err
		}
		t.model, t.close = m, m.Close
		t.feed, err = training.NewFeed(w, m, trainSet.Len())
	}
	if err != nil {
		return nil, t.closeAll(ctx, err)
	}
	if t.opt, err = optim.NewSGD(nn.Parameters(t.model), optim.SGDConfig{LR: c.lr, Momentum: 0.9}); err != nil {
		return nil, t.closeAll(ctx, err)
	}
	if t.loader, err = data.NewLoader(trainSet, w.Device, data.LoaderConfig{BatchSize: t.feed.Batch, DropLast: true, Sampler: t.feed.Sampler}); err != nil {
		return nil, t.closeAll(ctx, err)
	}
	state := optim.Checkpoint{Model: t.model, Optimizer: t.opt, RNG: t.device}
	if t.loop, err = c.OpenLoop(ctx, w, t.feed, state, out); err != nil {
		return nil, t.closeAll(ctx, err)
	}
	return t, nil
}

// closeAll ends the loop after err (Loop.End: a peer's loss commits the
// last completed step first) and stops the wrapper.
func (t *Trainer) closeAll(ctx context.Context, err error) error {
	if t.loop != nil {
		err = t.loop.End(ctx, err)
	}
	t.close()
	return err
}

// train runs the remaining epochs and returns what rank 0 saw.
func (t *Trainer) train(ctx context.Context) (res result, err error) {
	defer func() { err = t.closeAll(ctx, err) }()
	res.ResumedAt = t.loop.Position().Epoch
	curves := report.Curves{Title: "ResNet-18 on CIFAR-10"}
	start := time.Now()
	for epoch := range t.loop.Epochs(ctx, t.cfg.epochs) {
		total := t.feed.StepsPerEpoch
		if t.cfg.MaxSteps > 0 {
			total = min(total, t.cfg.MaxSteps)
		}
		progress := t.startEpoch(epoch, total)
		nn.Train(t.model)
		shown := t.loop.Position().Samples / t.feed.Global // the epoch's steps the progress has counted
		first, every := shown+1, min(5, t.cfg.LogInterval) // the steps whose loss rank 0 reads
		progress.ResumedAt(shown)
		measured := false
		for st, err := range t.loop.Steps(ctx, epoch, t.feed.Steps(t.loader.Epoch(ctx, epoch)), t.cfg.MaxSteps) {
			if err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			loss, err := t.feed.TrainStep(ctx, t.opt, st, t.loop.Position().Step, func(b data.Batch) *xla.Tensor {
				return nn.CrossEntropyLoss(t.model.Forward(b.Input), b.Target, nn.ReductionMean)
			})
			if err != nil {
				return res, err
			}
			// The first step's line too: a ResNet step on a CPU takes
			// seconds, and the job must show at once that it runs.
			if step := st.Index + 1; t.globalRank == 0 && readsLoss(step, first, every, total) {
				if res.FinalLoss, err = loss.Item(ctx); err != nil {
					return res, err
				}
				measured = true
				curves.AddLoss(t.loop.Position().Step+1, res.FinalLoss)
				progress.Step(step, res.FinalLoss, (step-shown)*t.feed.Global)
				shown = step
			}
		}
		progress.Done()
		if err := t.endEpoch(ctx, epoch, &res, &curves, measured); err != nil {
			return res, err
		}
	}
	res.Total = time.Since(start)
	return res, t.finish(ctx, &res, &curves)
}

// startEpoch prints the tutorial's epoch line on rank 0 and returns its
// progress line (nil elsewhere).
func (t *Trainer) startEpoch(epoch, total int) *report.Progress {
	if t.globalRank != 0 {
		return nil
	}
	fmt.Fprintf(t.out, "[GPU%d] Epoch %d | Batchsize: %d | Steps: %d\n", t.globalRank, epoch, t.feed.Batch, total)
	if t.feed.Deterministic() {
		fmt.Fprintf(t.out, "%s\n", t.feed)
	}
	return report.NewProgress(t.out, fmt.Sprintf("epoch %d/%d", epoch+1, t.cfg.epochs), total, t.cfg.LogInterval)
}

// endEpoch measures the test accuracy and exports --checkpoint.
func (t *Trainer) endEpoch(ctx context.Context, epoch int, res *result, curves *report.Curves, measured bool) error {
	var err error
	if res.Accuracy, err = report.Accuracy(ctx, t.net, t.device, t.testSet, 500); err != nil {
		return err
	}
	if t.globalRank == 0 {
		curves.AddAccuracy(epoch+1, res.Accuracy)
		fmt.Fprintf(t.out, "epoch %d: test accuracy %.2f%%, last loss %s\n", epoch+1, 100*res.Accuracy, report.Loss(res.FinalLoss, measured))
	}
	return t.cfg.Export(ctx, t.loop, epoch)
}

// finish prints rank 0's summary.
func (t *Trainer) finish(ctx context.Context, res *result, curves *report.Curves) error {
	var err error
	if res.Weights, err = nn.WeightsDigest(ctx, t.net); err != nil || t.globalRank != 0 {
		return err
	}
	steps := t.loop.Position().Step
	fmt.Fprintf(t.out, "weights sha256 %s\n", res.Weights)
	m := xla.GetMetrics()
	fmt.Fprintf(t.out, "Total training time: %.2f s (%d replica(s), %d steps, %.0f samples/s; test accuracy %.2f%%; programs: %d compiled, %d from the disk cache)\n",
		res.Total.Seconds(), t.worldSize, steps, float64(steps*t.feed.Global)/max(res.Total.Seconds(), 1e-9),
		100*res.Accuracy, m.Compilations, m.PersistentCacheHits)
	return t.cfg.Finish(t.out, curves)
}

// readsLoss tells whether rank 0 reads the loss after step (1-based, in
// the epoch): the epoch's first step run here (a ResNet step on a CPU
// takes seconds, and the job must show at once that it runs), every
// every-th, and the last.
func readsLoss(step, first, every, total int) bool {
	return step == first || step%every == 0 || step == total
}
