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
	"github.com/xladdp/xladdp/examples/internal/cmdline"
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
	model                            nn.Module                    // net, wrapped by DDP unless --no-ddp
	wrapper                          *ddp.DistributedDataParallel // nil with --no-ddp
	opt                              optim.Optimizer
	feed                             *cmdline.Feed
	loader                           *data.Loader
	testSet                          data.Dataset
	epochsRun                        int
	resumer                          *cmdline.Resumer
	at                               cmdline.Position // where a resumed run stood
	out                              io.Writer
	log                              *slog.Logger
	close                            func()
}

func newTrainer(ctx context.Context, c config, w ddp.Worker, trainSet, testSet data.Dataset, out io.Writer) (*Trainer, error) {
	t := &Trainer{localRank: w.LocalRank, globalRank: w.Rank, worldSize: w.WorldSize, cfg: c, device: w.Device, testSet: testSet,
		out: out, log: slog.With("rank", w.Rank, "local_rank", w.LocalRank), close: func() {}}
	net, err := nn.NewResNet18(w.Device, nn.NewRand(c.seed), nn.ResNetConfig{NumClasses: 10, CIFAR: true})
	if err != nil {
		return nil, err
	}
	t.net, t.model = net, net
	if !c.noDDP {
		m, err := ddp.Wrap(ctx, net, c.det.WrapOptions(c.batchSize, c.seed)...)
		if err != nil {
			return nil, err
		}
		t.model, t.wrapper, t.close = m, m, m.Close
	}
	if t.opt, err = optim.NewSGD(nn.Parameters(t.model), optim.SGDConfig{LR: c.lr, Momentum: 0.9}); err != nil {
		return nil, err
	}
	if t.feed, err = cmdline.NewFeed(w, t.wrapper, trainSet.Len(), c.batchSize, c.seed); err != nil {
		return nil, err
	}
	if t.loader, err = data.NewLoader(trainSet, w.Device, data.LoaderConfig{BatchSize: t.feed.Batch, DropLast: true, Sampler: t.feed.Sampler}); err != nil {
		return nil, err
	}
	state := t.state()
	resumed := false
	if t.resumer, t.at, resumed, err = c.Open(ctx, &state, w.WorldSize, t.feed.Batch, w.Rank == 0, out); err != nil {
		return nil, err
	}
	switch {
	case resumed:
		err = errors.Join(c.det.CheckResumed(state.Metadata, c.batchSize, "--checkpoint-dir "+c.Dir), t.feed.ResumeAt(t.at.Epoch, t.at.Samples))
	case c.Resume:
		if err = checkpoint.Load(ctx, c.Checkpoint, &state); err == nil {
			err = c.det.CheckResumed(state.Metadata, c.batchSize, "--checkpoint "+c.Checkpoint)
			t.at = cmdline.Position{Epoch: state.Epoch, Step: state.Step}
			t.log.Info("resuming from the snapshot", "epoch", state.Epoch)
		}
	}
	if err != nil {
		return nil, errors.Join(err, t.resumer.Close())
	}
	t.epochsRun = t.at.Epoch
	return t, nil
}

// state is what a checkpoint holds: the model (parameters and BatchNorm
// buffers), the optimizer and the random state, and a --deterministic
// run's cut of the global batch.
func (t *Trainer) state() optim.Checkpoint {
	return optim.Checkpoint{Model: t.model, Optimizer: t.opt, RNG: t.device, Metadata: t.cfg.det.Mark(nil, t.cfg.batchSize)}
}

// train runs the remaining epochs and returns what rank 0 saw.
func (t *Trainer) train(ctx context.Context) (res result, err error) {
	defer t.close()
	defer func() { err = errors.Join(err, t.resumer.Close()) }()
	res.ResumedAt = t.epochsRun
	rank0 := t.globalRank == 0
	curves := report.Curves{Title: "ResNet-18 on CIFAR-10"}
	start, steps := time.Now(), t.at.Step
	global, det := t.feed.Global, t.feed.Deterministic()
	for epoch := t.epochsRun; epoch < t.cfg.epochs; epoch++ {
		// The samples of the epoch's order used before a resume, and
		// the steps they made: the loader yields the rest.
		epochStart := t.at.Used(epoch)
		before := epochStart / global
		total := t.feed.StepsPerEpoch
		if t.cfg.MaxSteps > 0 {
			total = min(total, t.cfg.MaxSteps)
		}
		if rank0 {
			fmt.Fprintf(t.out, "[GPU%d] Epoch %d | Batchsize: %d | Steps: %d\n", t.globalRank, epoch, t.feed.Batch, total)
			if det {
				fmt.Fprintf(t.out, "%s\n", t.feed)
			}
		}
		var progress *report.Progress
		if rank0 {
			progress = report.NewProgress(t.out, fmt.Sprintf("epoch %d/%d", epoch+1, t.cfg.epochs), total, t.cfg.LogInterval)
		}
		nn.Train(t.model)
		shown := before // the epoch's steps the progress has counted
		measured := false
		for st, err := range t.feed.Steps(t.loader.Epoch(ctx, epoch)) {
			if err != nil {
				return res, err
			}
			index := before + st.Index // within the epoch
			if index >= total {
				break
			}
			loss, err := t.feed.TrainStep(ctx, t.wrapper, t.opt, st.Batches, steps, func(b data.Batch) *xla.Tensor {
				return nn.CrossEntropyLoss(t.model.Forward(b.Input), b.Target, nn.ReductionMean)
			})
			if err != nil {
				return res, err
			}
			steps++
			t.at = cmdline.Position{Epoch: epoch, Samples: epochStart + (st.Index+1)*global, Step: steps}
			if err := t.resumer.Step(ctx, t.state(), t.at); err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			// The first step's line too: a ResNet step on a CPU takes
			// seconds, and the job must show at once that it runs. A
			// deterministic step's loss is read on every replica, so
			// that all of them run the same programs.
			if step := index + 1; (rank0 || det) && (step == before+1 || step%5 == 0 || step == total) {
				if res.FinalLoss, err = loss.Item(ctx); err != nil {
					return res, err
				}
				measured = true
				curves.AddLoss(steps, res.FinalLoss)
				progress.Step(step, res.FinalLoss, (step-shown)*global)
				shown = step
			}
		}
		progress.Done()
		if res.Accuracy, err = report.Accuracy(ctx, t.net, t.device, t.testSet, 500); err != nil {
			return res, err
		}
		if rank0 {
			curves.AddAccuracy(epoch+1, res.Accuracy)
			fmt.Fprintf(t.out, "epoch %d: test accuracy %.2f%%, last loss %s\n", epoch+1, 100*res.Accuracy, report.Loss(res.FinalLoss, measured))
		}
		if t.cfg.Checkpoint != "" {
			ck := t.state()
			ck.Epoch, ck.Step = epoch+1, steps
			if err := checkpoint.Save(ctx, t.cfg.Checkpoint, ck); err != nil {
				return res, err
			}
		}
	}
	res.Total = time.Since(start)
	if res.Weights, err = cmdline.WeightsDigest(ctx, t.net); err != nil {
		return res, err
	}
	if rank0 {
		fmt.Fprintf(t.out, "weights sha256 %s\n", res.Weights)
		m := xla.GetMetrics()
		fmt.Fprintf(t.out, "Total training time: %.2f s (%d replica(s), %d steps, %.0f samples/s; test accuracy %.2f%%; programs: %d compiled, %d from the disk cache)\n",
			res.Total.Seconds(), t.worldSize, steps, float64(steps*global)/max(res.Total.Seconds(), 1e-9),
			100*res.Accuracy, m.Compilations, m.PersistentCacheHits)
		if err := t.cfg.Finish(t.out, &curves); err != nil {
			return res, err
		}
	}
	return res, nil
}
