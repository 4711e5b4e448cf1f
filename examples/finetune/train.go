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
	"github.com/xladdp/xladdp/examples/internal/cmdline"
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
	log := slog.With("rank", w.Rank)
	net, err := j.model(log)
	if err != nil {
		return res, err
	}
	model, err := ddp.Wrap(ctx, net, c.det.WrapOptions(c.batchSize, c.seed)...)
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
	feed, err := cmdline.NewFeed(w, model, j.train.Len(), c.batchSize, c.seed)
	if err != nil {
		return res, err
	}
	steps := feed.StepsPerEpoch
	if c.MaxSteps > 0 {
		steps = min(steps, c.MaxSteps)
	}
	loader, err := data.NewLoader(j.train, d, data.LoaderConfig{BatchSize: feed.Batch, DropLast: true, Sampler: feed.Sampler})
	if err != nil {
		return res, err
	}
	ck := optim.Checkpoint{Model: model, Optimizer: opt, RNG: d, Metadata: c.det.Mark(map[string]string{"classes": j.classes}, c.batchSize)}
	resumer, at, resumed, err := c.Open(ctx, &ck, w.WorldSize, feed.Batch, rank0, j.out)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, resumer.Close()) }()
	from := c.Dir
	if !resumed && c.Resume {
		if err := checkpoint.Load(ctx, c.Checkpoint, &ck); err != nil {
			return res, err
		}
		from, at = c.Checkpoint, cmdline.Position{Epoch: ck.Epoch, Step: ck.Step}
	}
	if resumed || c.Resume {
		if ck.Metadata["classes"] != j.classes {
			return res, fmt.Errorf("%s was trained on the classes %s, not this folder's %s", from, ck.Metadata["classes"], j.classes)
		}
		if err := c.det.CheckResumed(ck.Metadata, c.batchSize, from); err != nil {
			return res, err
		}
		ck.Metadata = c.det.Mark(ck.Metadata, c.batchSize)
		if err := feed.ResumeAt(at.Epoch, at.Samples); err != nil {
			return res, err
		}
		for range at.Epoch {
			sched.Step()
		}
		res.ResumedAt = at.Epoch
		log.Info("resumed", "checkpoint", from, "epoch", at.Epoch)
	}
	if rank0 {
		fmt.Fprintf(j.out, "fine-tuning ResNet-18 on %d %s images of %d classes on %d replicas (%s), %d steps an epoch, %s, %d×%d crops, SGD lr %.4g\n",
			j.train.Len(), j.cfg.trainDir, len(j.train.Classes()), w.WorldSize, d, steps, feed, c.imageSize, c.imageSize, opt.LR())
	}
	curves := report.Curves{Title: "ResNet-18 fine-tuning", AccuracyOf: "val"}
	start, done := time.Now(), at.Step
	global := feed.Global
	var runLoss bool // whether this run read a loss
	for epoch := at.Epoch; epoch < c.epochs; epoch++ {
		nn.Train(model)
		epochLoss := false
		// The samples of the epoch's order used before a resume, and
		// the steps they made: the loader yields the rest.
		epochStart := at.Used(epoch)
		before := epochStart / global
		var progress *report.Progress
		if rank0 {
			progress = report.NewProgress(j.out, fmt.Sprintf("epoch %d/%d", epoch+1, c.epochs), steps, c.LogInterval)
		}
		for st, err := range feed.Steps(loader.Epoch(ctx, epoch)) {
			if err != nil {
				return res, err
			}
			index := before + st.Index // within the epoch
			if index >= steps {
				break
			}
			loss, err := feed.TrainStep(ctx, model, opt, st.Batches, done, func(b data.Batch) *xla.Tensor {
				return nn.CrossEntropyLoss(model.Forward(b.Input), b.Target, nn.ReductionMean)
			})
			if err != nil {
				return res, err
			}
			done++
			at = cmdline.Position{Epoch: epoch, Samples: epochStart + (st.Index+1)*global, Step: done}
			if err := resumer.Step(ctx, ck, at); err != nil {
				return res, err // checkpoint.ErrPreempted: exit 75
			}
			// A deterministic step's loss is read on every replica, so
			// that all of them run the same programs.
			if rank0 || feed.Deterministic() {
				if res.FinalLoss, err = loss.Item(ctx); err != nil {
					return res, err
				}
				epochLoss, runLoss = true, true
				curves.AddLoss(done, res.FinalLoss)
				progress.Step(index+1, res.FinalLoss, global)
			}
		}
		progress.Done()
		sched.Step()
		if res.Accuracy, err = report.Accuracy(ctx, net, d, j.val, c.batchSize); err != nil {
			return res, err
		}
		res.Epochs = epoch + 1
		if rank0 {
			curves.AddAccuracy(epoch+1, res.Accuracy)
			fmt.Fprintf(j.out, "epoch %d: val accuracy %.2f%% (%d images), last loss %s, next lr %.4g\n",
				epoch+1, 100*res.Accuracy, j.val.Len(), report.Loss(res.FinalLoss, epochLoss), opt.LR())
		}
		if c.Checkpoint != "" {
			saved := ck
			saved.Epoch, saved.Step = epoch+1, done
			if err := checkpoint.Save(ctx, c.Checkpoint, saved); err != nil {
				return res, err
			}
		}
	}
	res.Trained = time.Since(start)
	res.Samples = done * global
	if res.Weights, err = cmdline.WeightsDigest(ctx, net); err != nil {
		return res, err
	}
	if c.modelDir != "" {
		path := filepath.Join(c.modelDir, modelFile)
		meta := map[string]string{"classes": j.classes, "image_size": strconv.Itoa(c.imageSize), "val_accuracy": strconv.FormatFloat(res.Accuracy, 'f', 4, 64)}
		if err := checkpoint.SaveStateDict(ctx, path, net, meta); err != nil {
			return res, err
		}
		if rank0 {
			fmt.Fprintf(j.out, "wrote %s\n", path)
		}
	}
	if rank0 {
		fmt.Fprintf(j.out, "weights sha256 %s\n", res.Weights)
		m := xla.GetMetrics()
		fmt.Fprintf(j.out, "done: %d epoch(s), val accuracy %.2f%%, final loss %s, %v training, %.1f samples/s, programs: %d compiled, %d from the disk cache\n",
			res.Epochs, 100*res.Accuracy, report.Loss(res.FinalLoss, runLoss), res.Trained.Round(time.Millisecond),
			float64(res.Samples)/max(res.Trained.Seconds(), 1e-9), m.Compilations, m.PersistentCacheHits)
		if err := c.Finish(j.out, &curves); err != nil {
			return res, err
		}
	}
	return res, nil
}
