// Command finetune is the SageMaker notebook's task: fine-tune an
// ImageNet ResNet-18 on an ImageFolder of a few classes (the ants/bees
// "hymenoptera" layout, train/<class>/*.jpg and val/<class>/*.jpg),
// replacing its fc layer for the folder's classes, with torchvision's
// transfer-learning recipe (RandomResizedCrop + flip, SGD lr 0.001
// momentum 0.9, StepLR(7, 0.1)) and the validation accuracy each epoch.
//
//	finetune --spawn --data hymenoptera_data --pretrained resnet18.safetensors
//	ddprun --nproc_per_node=2 finetune --data hymenoptera_data --pretrained resnet18.safetensors
//
// The pretrained weights are a safetensors state dict with torchvision's
// names; torchvision's own are written by
//
//	python3 -c "import torchvision; from safetensors.torch import save_file; save_file(torchvision.models.resnet18(weights='IMAGENET1K_V1').state_dict(), 'resnet18.safetensors')"
//
// Under SageMaker the train and val channels ($SM_CHANNEL_TRAIN,
// $SM_CHANNEL_VAL), the hyperparameters ($SM_HPS) and the model directory
// ($SM_MODEL_DIR, which gets resnet18.safetensors: torchvision's names,
// the classes in its metadata) are read when present.
//
// With --deterministic (--batch-size then being the global batch) the
// fine-tuned weights and BatchNorm statistics are the same bits at any
// world size (docs/deterministic.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/examples/internal/antsbees"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// modelFile is the fine-tuned model's name in --model-dir.
const modelFile = "resnet18.safetensors"

type config struct {
	cmdline.Run
	launch                       ddp.Options
	epochs, batchSize, imageSize int
	stepSize                     int
	lr, momentum, gamma          float64
	seed                         uint64
	dataDir, trainDir, valDir    string
	pretrained, modelDir         string
	// synthetic: train on generated ants and bees (antsbees), no download.
	synthetic bool
}

// syntheticPerClass is how many training pictures of each class
// --synthetic generates (half as many validation pictures).
const syntheticPerClass = 60

// result is what rank 0 measured.
type result struct {
	Accuracy, FinalLoss float64
	Epochs, Samples     int
	Trained             time.Duration
	Weights             string // the sha256 of the trained parameters and buffers
	Classes             []string
	ResumedAt           int
}

func main() {
	cmdline.Main("finetune", func(ctx context.Context, args []string, out io.Writer) error {
		_, err := run(ctx, args, out)
		return err
	})
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs, launch := cmdline.FlagSet("finetune", out)
	fs.StringVar(&c.dataDir, "data", "hymenoptera_data", "folder with train/<class>/*.jpg and val/<class>/*.jpg")
	fs.StringVar(&c.trainDir, "train", os.Getenv("SM_CHANNEL_TRAIN"), "training ImageFolder (default $SM_CHANNEL_TRAIN, else DATA/train)")
	fs.StringVar(&c.valDir, "val", os.Getenv("SM_CHANNEL_VAL"), "validation ImageFolder (default $SM_CHANNEL_VAL, else DATA/val)")
	fs.BoolVar(&c.synthetic, "synthetic", false, fmt.Sprintf("train on %d generated pictures of ants and bees a class "+
		"(a stand-in for the tutorial's download, hymenoptera_data)", syntheticPerClass))
	fs.StringVar(&c.pretrained, "pretrained", "", "ResNet-18 weights to start from: a safetensors state dict with torchvision's names (its fc is replaced)")
	fs.StringVar(&c.modelDir, "model-dir", os.Getenv("SM_MODEL_DIR"), "write the fine-tuned "+modelFile+" here at the end, on rank 0 (default $SM_MODEL_DIR)")
	fs.IntVar(&c.epochs, "epochs", 3, "epochs to train")
	fs.IntVar(&c.batchSize, "batch-size", 4, "batch size per replica (with --deterministic, the global batch)")
	fs.IntVar(&c.imageSize, "image-size", 224, "side of the square crops the network sees (validation resizes to 256/224 of it first)")
	fs.Float64Var(&c.lr, "lr", 0.001, "SGD learning rate")
	fs.Float64Var(&c.momentum, "momentum", 0.9, "SGD momentum")
	fs.IntVar(&c.stepSize, "step-size", 7, "StepLR: epochs between learning-rate decays")
	fs.Float64Var(&c.gamma, "gamma", 0.1, "StepLR: the decay factor")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the new fc layer (the whole model without --pretrained), the augmentation and the data order")
	c.Run.AddFlags(fs, 10)
	if err := cmdline.SageMakerHyperparameters(fs, os.Getenv("SM_HPS")); err != nil {
		return c, err
	}
	if err := cmdline.Parse(fs, args); err != nil {
		return c, err
	}
	// The settings a resume from --checkpoint-dir must keep (or name
	// in --resume-override).
	if err := launch.Checkpoints.Record(fs, "image-size", "batch-size", "lr", "momentum", "step-size", "gamma", "seed", "synthetic"); err != nil {
		return c, err
	}
	c.launch = *launch
	dataGiven := false
	fs.Visit(func(f *pflag.Flag) { dataGiven = dataGiven || f.Name == "data" })
	if c.synthetic && (c.trainDir != "" || c.valDir != "" || dataGiven) {
		return c, errors.New("--synthetic generates its own pictures: leave out --data, --train and --val (and SageMaker's train and val channels)")
	}
	if c.trainDir == "" {
		c.trainDir = filepath.Join(c.dataDir, "train")
	}
	if c.valDir == "" {
		c.valDir = filepath.Join(c.dataDir, "val")
	}
	switch {
	case c.epochs < 1 || c.batchSize < 1 || c.stepSize < 1 || c.LogInterval < 1:
		return c, errors.New("--epochs, --batch-size, --step-size and --log-interval must be positive")
	case c.imageSize < 32 || c.imageSize > 4096:
		return c, fmt.Errorf("--image-size=%d: ResNet-18 needs 32 to 4096 pixels", c.imageSize)
	case !(c.lr > 0) || !(c.momentum >= 0 && c.momentum < 1) || !(c.gamma > 0 && c.gamma <= 1):
		return c, fmt.Errorf("--lr=%g must be positive, --momentum=%g in [0, 1) and --gamma=%g in (0, 1]", c.lr, c.momentum, c.gamma)
	case c.modelDir != "" && c.Checkpoint != "" && filepath.Clean(c.Checkpoint) == filepath.Join(c.modelDir, modelFile):
		return c, fmt.Errorf("--checkpoint %s is where the fine-tuned model goes (--model-dir): give the checkpoint another name", c.Checkpoint)
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
// replica (cmdline.TutorialBatch), micro-shards of 2 by default.
func (c config) batch(replicas int) ddp.Batch {
	return cmdline.TutorialBatch(c.launch.Mode, c.batchSize, replicas, 2, c.seed)
}

// writeSynthetic writes --synthetic's pictures into a temporary
// directory, points c's --train and --val at it, and returns what
// removes it.
func writeSynthetic(c *config, out io.Writer) (remove func(), err error) {
	dir, err := os.MkdirTemp("", "finetune-synthetic-")
	if err != nil {
		return nil, err
	}
	if err := antsbees.Write(dir, syntheticPerClass, c.seed); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("--synthetic: %w", err)
	}
	c.trainDir, c.valDir = filepath.Join(dir, "train"), filepath.Join(dir, "val")
	fmt.Fprintf(out, "training on generated pictures of ants and bees (--synthetic): %d of each class, %d to validate\n",
		syntheticPerClass, syntheticPerClass/2)
	return func() { os.RemoveAll(dir) }, nil
}

// folders opens the training and validation ImageFolders with
// torchvision's transfer-learning transforms and checks they have the
// same classes.
func folders(c config) (train, val *data.ImageFolder, err error) {
	train, err = data.NewImageFolder(c.trainDir, data.ImageFolderConfig{
		Transforms: []data.Transform{data.RandomResizedCrop{Size: c.imageSize}, data.RandomHorizontalFlip{P: 0.5}},
		Size:       c.imageSize, Mean: data.ImageNetMean, Std: data.ImageNetStd, Seed: c.seed,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("the training images: %w; give --data DIR with train/<class>/*.jpg and val/<class>/*.jpg "+
			"(the tutorial's: https://download.pytorch.org/tutorial/hymenoptera_data.zip), --train and --val (SageMaker: the "+
			"train and val channels), or --synthetic to train on generated pictures", err)
	}
	val, err = data.NewImageFolder(c.valDir, data.ImageFolderConfig{
		Transforms: []data.Transform{data.Resize{Size: (c.imageSize*256 + 112) / 224}, data.CenterCrop{Size: c.imageSize}},
		Size:       c.imageSize, Mean: data.ImageNetMean, Std: data.ImageNetStd,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("the validation images: %w; give --val DIR (or DATA/val) with the training set's classes", err)
	}
	if !slices.Equal(train.Classes(), val.Classes()) {
		return nil, nil, fmt.Errorf("%s has classes %q but %s has %q: they must be the same folders", c.trainDir, train.Classes(), c.valDir, val.Classes())
	}
	return train, val, nil
}

func run(ctx context.Context, args []string, out io.Writer) (result, error) {
	c, err := parse(args, out)
	if err != nil {
		return result{}, err
	}
	if c.synthetic {
		remove, err := writeSynthetic(&c, out)
		if err != nil {
			return result{}, err
		}
		defer remove()
	}
	trainSet, valSet, err := folders(c)
	if err != nil {
		return result{}, err
	}
	var weights safetensors.File
	if c.pretrained != "" {
		// Read once, before any replica starts: a bad file fails the job
		// with its own message instead of each replica's.
		if weights, err = safetensors.ReadFile(c.pretrained); err != nil {
			return result{}, err
		}
	}
	if c.modelDir != "" {
		if err := os.MkdirAll(c.modelDir, 0o755); err != nil {
			return result{}, fmt.Errorf("--model-dir: %w", err)
		}
	}
	classes, err := json.Marshal(trainSet.Classes())
	if err != nil {
		return result{}, err
	}
	xla.ResetMetrics()
	res := result{Classes: trainSet.Classes()}
	err = ddp.Run(ctx, func(ctx context.Context, w ddp.Worker) error {
		j := job{cfg: c, worker: w, train: trainSet, val: valSet, weights: weights, classes: string(classes), out: out}
		r, err := j.run(ctx)
		if w.Rank == 0 {
			r.Classes = res.Classes
			res = r
		}
		return err
	}, c.launch)
	return res, err
}
