package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// job is one replica's fine-tuning.
type job struct {
	cfg        config
	worker     ddp.Worker
	train, val *data.ImageFolder
	weights    safetensors.File // empty without --pretrained
	classes    string           // JSON, for the model file
	out        io.Writer
}

// model builds ResNet-18 with fc for the folder's classes and loads the
// pretrained backbone.
func (j *job) model(log *slog.Logger) (*nn.ResNet, error) {
	classes := len(j.train.Classes())
	net, err := nn.NewResNet18(j.worker.Device, nn.NewRand(j.cfg.seed), nn.ResNetConfig{NumClasses: classes})
	if err != nil {
		return nil, err
	}
	if j.cfg.pretrained == "" {
		if j.worker.Rank == 0 {
			fmt.Fprintln(j.out, "no --pretrained weights: training ResNet-18 from scratch; fine-tuning wants torchvision's ImageNet weights, which\n"+
				`  python3 -c "import torchvision; from safetensors.torch import save_file; save_file(torchvision.models.resnet18(weights='IMAGENET1K_V1').state_dict(), 'resnet18.safetensors')"`+
				"\nwrites for --pretrained resnet18.safetensors")
		}
		return net, nil
	}
	loaded, fileFC, err := loadPretrained(net, j.weights, j.cfg.pretrained)
	if err != nil {
		return nil, err
	}
	log.Debug("loaded the pretrained backbone", "file", j.cfg.pretrained, "tensors", loaded)
	if j.worker.Rank == 0 {
		fmt.Fprintf(j.out, "loaded %d tensors from %s; replaced fc %v with a new one for %d classes %s\n",
			loaded, j.cfg.pretrained, fileFC, classes, j.classes)
	}
	return net, nil
}

func (j *job) run(ctx context.Context) (res result, err error) {
	c, w := j.cfg, j.worker
	d, rank0 := w.Device, w.Rank == 0
	net, err := j.model(slog.With("rank", w.Rank))
	if err != nil {
		return res, err
	}
	model, err := w.Wrap(ctx, net, c.batch(w.WorldSize))
	if err != nil {
		return res, err
	}
	defer model.Close()
	opt, err := optim.NewSGD(nn.Parameters(model), optim.SGDConfig{LR: c.lr, Momentum: c.momentum})
	if err != nil {
		return res, err
	}
	sched, err := optim.NewStepLR(opt, c.stepSize, c.gamma)
	if err != nil {
		return res, err
	}
	feed, err := training.NewFeed(w, model, j.train.Len())
	if err != nil {
		return res, err
	}
	loader, err := data.NewLoader(j.train, d, data.LoaderConfig{BatchSize: feed.Batch, DropLast: true, Sampler: feed.Sampler})
	if err != nil {
		return res, err
	}
	loop, err := j.openLoop(ctx, feed, optim.Checkpoint{Model: model, Optimizer: opt, RNG: d, Metadata: map[string]string{"classes": j.classes}})
	if err != nil {
		return res, err
	}
	defer func() { err = loop.End(ctx, err) }()
	r := &runReport{job: j, curves: report.Curves{Title: "ResNet-18 fine-tuning", AccuracyOf: "val"}, start: time.Now()}
	r.res.ResumedAt = loop.Position().Epoch
	for range r.res.ResumedAt {
		sched.Step() // the learning rate of the epoch it resumes at
	}
	steps := feed.StepsPerEpoch
	if c.MaxSteps > 0 {
		steps = min(steps, c.MaxSteps)
	}
	if rank0 {
		fmt.Fprintf(j.out, "fine-tuning ResNet-18 on %d %s images of %d classes on %d replicas (%s), %d steps an epoch, %s, %d×%d crops, SGD lr %.4g\n",
			j.train.Len(), j.cfg.trainDir, len(j.train.Classes()), w.WorldSize, d, steps, feed, c.imageSize, c.imageSize, opt.LR())
	}
	for epoch := range loop.Epochs(ctx, c.epochs) {
		nn.Train(model)
		r.startEpoch(epoch, steps, loop.Position().Samples/feed.Global)
		for st, err := range loop.Steps(ctx, epoch, feed.Steps(loader.Epoch(ctx, epoch)), c.MaxSteps) {
			if err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			loss, err := feed.TrainStep(ctx, opt, st, loop.Position().Step, func(b data.Batch) *xla.Tensor {
				return nn.CrossEntropyLoss(model.Forward(b.Input), b.Target, nn.ReductionMean)
			})
			if err == nil {
				err = r.logLoss(ctx, loss, st.Index+1, loop.Position().Step+1, feed.Global)
			}
			if err != nil {
				return res, err
			}
		}
		sched.Step()
		if err := r.endEpoch(ctx, net, epoch, opt.LR()); err != nil {
			return res, err
		}
		if err := c.Export(ctx, loop, epoch); err != nil {
			return res, err
		}
	}
	return r.finish(ctx, net, loop.Position().Step*feed.Global)
}

// openLoop opens the replica's training loop and refuses a checkpoint of
// another folder's classes.
func (j *job) openLoop(ctx context.Context, feed *training.Feed, state optim.Checkpoint) (*training.Loop, error) {
	loop, err := j.cfg.OpenLoop(ctx, j.worker, feed, state, j.out)
	if err != nil {
		return nil, err
	}
	if was := loop.State().Metadata["classes"]; loop.Resumed() != "" && was != j.classes {
		return nil, errors.Join(fmt.Errorf("the checkpoint (%s) was trained on the classes %s, not this folder's %s", loop.Resumed(), was, j.classes), loop.Close())
	}
	return loop, nil
}

// runReport is what a replica measures and rank 0 prints.
type runReport struct {
	*job
	res      result
	curves   report.Curves
	progress *report.Progress // rank 0's, of the current epoch
	start    time.Time
	// epochLoss and runLoss: whether a loss was read in the epoch, at all.
	epochLoss, runLoss bool
}

func (r *runReport) startEpoch(epoch, steps, resumed int) {
	r.progress, r.epochLoss = nil, false
	if r.worker.Rank == 0 {
		r.progress = report.NewProgress(r.out, fmt.Sprintf("epoch %d/%d", epoch+1, r.cfg.epochs), steps, r.cfg.LogInterval)
		r.progress.ResumedAt(resumed)
	}
}

// logLoss reads rank 0's loss of every step (step within the epoch,
// steps since the start): the step has run, so it costs no program.
func (r *runReport) logLoss(ctx context.Context, loss *xla.Tensor, step, steps, global int) error {
	if r.worker.Rank != 0 {
		return nil
	}
	var err error
	if r.res.FinalLoss, err = loss.Item(ctx); err != nil {
		return err
	}
	r.epochLoss, r.runLoss = true, true
	r.curves.AddLoss(steps, r.res.FinalLoss)
	r.progress.Step(step, r.res.FinalLoss, global)
	return nil
}

// endEpoch measures the validation accuracy.
func (r *runReport) endEpoch(ctx context.Context, net nn.Module, epoch int, lr float64) error {
	r.progress.Done()
	var err error
	if r.res.Accuracy, err = report.Accuracy(ctx, net, r.worker.Device, r.val, r.cfg.batchSize); err != nil {
		return err
	}
	r.res.Epochs = epoch + 1
	if r.worker.Rank == 0 {
		r.curves.AddAccuracy(epoch+1, r.res.Accuracy)
		fmt.Fprintf(r.out, "epoch %d: val accuracy %.2f%% (%d images), last loss %s, next lr %.4g\n",
			epoch+1, 100*r.res.Accuracy, r.val.Len(), report.Loss(r.res.FinalLoss, r.epochLoss), lr)
	}
	return nil
}

// finish writes --model-dir's model and prints rank 0's summary.
func (r *runReport) finish(ctx context.Context, net nn.Module, samples int) (result, error) {
	res, c, rank0 := r.res, r.cfg, r.worker.Rank == 0
	res.Trained, res.Samples = time.Since(r.start), samples
	var err error
	if res.Weights, err = nn.WeightsDigest(ctx, net); err != nil {
		return res, err
	}
	if c.modelDir != "" {
		path := filepath.Join(c.modelDir, modelFile)
		meta := map[string]string{"classes": r.classes, "image_size": strconv.Itoa(c.imageSize), "val_accuracy": strconv.FormatFloat(res.Accuracy, 'f', 4, 64)}
		if err := checkpoint.SaveStateDict(ctx, path, net, meta); err != nil {
			return res, err
		}
		if rank0 {
			fmt.Fprintf(r.out, "wrote %s\n", path)
		}
	}
	if !rank0 {
		return res, nil
	}
	fmt.Fprintf(r.out, "weights sha256 %s\n", res.Weights)
	m := xla.GetMetrics()
	fmt.Fprintf(r.out, "done: %d epoch(s), val accuracy %.2f%%, final loss %s, %v training, %.1f samples/s, programs: %d compiled, %d from the disk cache\n",
		res.Epochs, 100*res.Accuracy, report.Loss(res.FinalLoss, r.runLoss), res.Trained.Round(time.Millisecond),
		float64(res.Samples)/max(res.Trained.Seconds(), 1e-9), m.Compilations, m.PersistentCacheHits)
	return res, c.Finish(r.out, &r.curves)
}
