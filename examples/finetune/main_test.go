package main

import (
	"bytes"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "finetune", main) }

// TestLongLearnsUnderSageMakerThenFineTunesUnderDdprun is the notebook's
// path end to end on a fixture folder (chance: 50%):
//  1. under a SageMaker environment alone (channels, hyperparameters,
//     model directory; no data flags), 2 spawned replicas train from
//     scratch for 6 epochs of 6 steps at 32×32 and pass 90% val accuracy;
//     the model, its classes, the checkpoint and the plot are written;
//  2. as 2 ranks under ddprun, that model is the --pretrained backbone: fc
//     is replaced, and 2 steps pass 90% again (from scratch 6 steps gave
//     50%: the backbone is what knows the classes);
//  3. --resume continues from the checkpoint at epoch 7, and refuses the
//     checkpoint for a folder of other classes.
func TestLongLearnsUnderSageMakerThenFineTunesUnderDdprun(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	exampletest.ImageFolder(t, dir, 24)
	modelDir, ckpt, plot := filepath.Join(dir, "model"), filepath.Join(dir, "ckpt.safetensors"), filepath.Join(dir, "curves.png")
	t.Setenv("SM_CHANNEL_TRAIN", filepath.Join(dir, "train"))
	t.Setenv("SM_CHANNEL_VAL", filepath.Join(dir, "val"))
	t.Setenv("SM_MODEL_DIR", modelDir)
	t.Setenv("SM_HPS", `{"epochs": 6, "lr": 0.01, "image_size": 32, "sagemaker_program": "finetune"}`)
	var out bytes.Buffer
	res, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "2", "--checkpoint", ckpt, "--plot", plot, "--log-interval", "3"}, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, []string{"ants", "bees"}, res.Classes)
	assert.Equal(t, 6, res.Epochs)
	assert.Greater(t, res.Accuracy, 0.9, out.String())
	assert.Contains(t, out.String(), "from scratch")
	assert.Contains(t, out.String(), "6 steps an epoch, batch 4 per replica (global 8), 32×32 crops, SGD lr 0.01")
	assert.FileExists(t, plot)
	assert.FileExists(t, ckpt)
	model := filepath.Join(modelDir, modelFile)
	d := xlatest.NewEngine(t, 1).Device(0)
	saved, err := nn.NewResNet18(d, nn.NewRand(9), nn.ResNetConfig{NumClasses: 2})
	require.NoError(t, err)
	meta, err := nn.LoadStateDict(model, saved)
	require.NoError(t, err, "the model directory holds a plain torchvision-named state dict")
	assert.Equal(t, `["ants","bees"]`, meta["classes"])
	assert.Equal(t, "32", meta["image_size"])

	for _, env := range []string{"SM_CHANNEL_TRAIN", "SM_CHANNEL_VAL", "SM_MODEL_DIR", "SM_HPS"} {
		t.Setenv(env, "")
	}
	args := []string{"--data", dir, "--image-size", "32", "--lr", "0.01", "--epochs", "1", "--max-steps", "2", "--pretrained", model}
	cmd := exec.Command(exampletest.Ddprun(t), append([]string{"--nproc_per_node=2"}, exampletest.Self()...)...)
	cmd.Env = append(os.Environ(), exampletest.Env("finetune", args...)...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "[rank0]:loaded 120 tensors from "+model+"; replaced fc [2 512] with a new one for 2 classes")
	assert.NotContains(t, string(b), "[rank1]:loaded", "rank 0 alone reports")
	m := regexp.MustCompile(`\[rank0\]:epoch 1: val accuracy (\d+\.\d+)%`).FindSubmatch(b)
	require.NotNil(t, m, "%s", b)
	acc, _ := strconv.ParseFloat(string(m[1]), 64)
	assert.Greater(t, acc, 90.0, "%s", b)

	out.Reset()
	res, err = run(t.Context(), []string{"--spawn", "--data", dir, "--image-size", "32", "--epochs", "7", "--checkpoint", ckpt, "--resume"}, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, 6, res.ResumedAt)
	assert.Equal(t, 7, res.Epochs)
	assert.NotContains(t, out.String(), "epoch 6:")
	assert.Contains(t, out.String(), "epoch 7: val accuracy")

	other := filepath.Join(t.TempDir(), "other")
	for _, split := range []string{"train", "val"} {
		require.NoError(t, os.MkdirAll(filepath.Join(other, split), 0o755))
		for from, to := range map[string]string{"ants": "wasps", "bees": "bees"} {
			require.NoError(t, os.Symlink(filepath.Join(dir, split, from), filepath.Join(other, split, to)))
		}
	}
	_, err = run(t.Context(), []string{"--spawn", "--data", other, "--image-size", "32", "--epochs", "7", "--checkpoint", ckpt, "--resume"}, &bytes.Buffer{})
	assert.ErrorContains(t, err, `was trained on the classes ["ants","bees"], not this folder's ["bees","wasps"]`)
}

// TestLoadPretrained: a torchvision-named ImageNet state dict (fc for
// 1000 classes) gives a 2-class model every tensor but fc, which keeps
// its fresh initialisation; our checkpoint's "model." names load too;
// a file of another network, another stem or no tensors is an error that
// says what is wrong, and a failed load changes nothing.
func TestLoadPretrained(t *testing.T) {
	ctx := xlatest.Context(t)
	d := xlatest.NewEngine(t, 1).Device(0)
	dir := t.TempDir()
	imagenet, err := nn.NewResNet18(d, nn.NewRand(5), nn.ResNetConfig{NumClasses: 1000})
	require.NoError(t, err)
	torchFile := filepath.Join(dir, "resnet18.safetensors")
	require.NoError(t, nn.SaveStateDict(ctx, torchFile, imagenet, nil))
	ckptFile := filepath.Join(dir, "ckpt.safetensors")
	require.NoError(t, optim.WriteCheckpointFile(ctx, ckptFile, optim.Checkpoint{Model: imagenet}))
	cifar, err := nn.NewResNet18(d, nn.NewRand(5), nn.ResNetConfig{NumClasses: 1000, CIFAR: true})
	require.NoError(t, err)
	cifarFile := filepath.Join(dir, "cifar.safetensors")
	require.NoError(t, nn.SaveStateDict(ctx, cifarFile, cifar, nil))
	mnist, err := nn.NewMNISTNet(d, nn.NewRand(5))
	require.NoError(t, err)
	mnistFile := filepath.Join(dir, "mnist.safetensors")
	require.NoError(t, nn.SaveStateDict(ctx, mnistFile, mnist, nil))
	edited, err := safetensors.ReadFile(torchFile)
	require.NoError(t, err)
	edited.Tensors = slices.DeleteFunc(edited.Tensors, func(t safetensors.Tensor) bool { return t.Name == "layer1.0.bn1.bias" })
	edited.Tensors = append(edited.Tensors, safetensors.Tensor{Name: "extra.weight", DType: "F32", Shape: []int{1}, Data: make([]byte, 4)})
	editedFile := filepath.Join(dir, "edited.safetensors")
	require.NoError(t, safetensors.WriteFile(editedFile, edited))
	emptyFile := filepath.Join(dir, "empty.safetensors")
	require.NoError(t, safetensors.WriteFile(emptyFile, safetensors.File{}))

	values := func(m nn.Module, name string) []float32 {
		for _, n := range nn.StateDict(m) {
			if n.Name == name {
				v, err := n.Tensor.Cast(xla.Float32).Float32s(ctx)
				require.NoError(t, err)
				return v
			}
		}
		t.Fatalf("no %s", name)
		return nil
	}
	for _, file := range []string{torchFile, ckptFile} {
		net, err := nn.NewResNet18(d, nn.NewRand(1), nn.ResNetConfig{NumClasses: 2})
		require.NoError(t, err)
		fresh := values(net, "fc.weight")
		weights, err := safetensors.ReadFile(file)
		require.NoError(t, err)
		loaded, fileFC, err := loadPretrained(net, weights, file)
		require.NoError(t, err, file)
		assert.Equal(t, 120, loaded, "122 state dict entries but fc.weight and fc.bias")
		assert.Equal(t, []int{1000, 512}, fileFC)
		for _, name := range []string{"conv1.weight", "layer4.1.bn2.running_var", "layer3.0.downsample.0.weight", "bn1.num_batches_tracked"} {
			assert.Equal(t, values(imagenet, name), values(net, name), "%s from %s", name, file)
		}
		assert.Equal(t, fresh, values(net, "fc.weight"), "fc keeps its new initialisation")
		assert.Equal(t, []int{2, 512}, net.FC.Weight.Dims())
	}

	for _, tc := range []struct{ file, want string }{
		{cifarFile, "mis-shaped: conv1.weight (file F32[64 3 3 3], model F32[64 3 7 7])"},
		{mnistFile, "is not a ResNet-18 state dict: it has no conv1.weight (want torchvision's names)"},
		{editedFile, "does not match: missing: layer1.0.bn1.bias; unexpected: extra.weight"},
		{emptyFile, "is not a ResNet-18 state dict: it has no conv1.weight"},
	} {
		net, err := nn.NewResNet18(d, nn.NewRand(1), nn.ResNetConfig{NumClasses: 2})
		require.NoError(t, err)
		before := values(net, "conv1.weight")
		weights, err := safetensors.ReadFile(tc.file)
		require.NoError(t, err)
		_, _, err = loadPretrained(net, weights, tc.file)
		assert.ErrorContains(t, err, tc.want)
		assert.ErrorContains(t, err, tc.file)
		assert.Equal(t, before, values(net, "conv1.weight"), "a failed load changed the model")
	}
}

// TestBadInputs: every hostile input is an error that says what to do,
// before any training starts.
func TestBadInputs(t *testing.T) {
	exampletest.CleanEnv(t)
	root := t.TempDir()
	exampletest.ImageFolder(t, root, 2)
	tiny := filepath.Join(root, "train")
	pth := filepath.Join(t.TempDir(), "resnet18.pth")
	require.NoError(t, os.WriteFile(pth, []byte("PK\x03\x04\x14\x00\x08\x08\x08\x00archive/data.pkl"), 0o644))
	otherClasses := t.TempDir()
	exampletest.ImageFolder(t, otherClasses, 2)
	require.NoError(t, os.Rename(filepath.Join(otherClasses, "val", "bees"), filepath.Join(otherClasses, "val", "wasps")))
	corrupt := t.TempDir()
	exampletest.ImageFolder(t, corrupt, 2)
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, "train", "ants", "ants_0.jpg"), []byte("\xff\xd8 half a jpeg"), 0o644))
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o644))
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no data", []string{"--data", filepath.Join(root, "none")}, nil, "the training images: data: ImageFolder: open " + filepath.Join(root, "none", "train")},
		{"no data says what to give", []string{"--data", filepath.Join(root, "none")}, nil, "give --data DIR with train/<class>/*.jpg and val/<class>/*.jpg"},
		{"no data names the download and --synthetic", []string{"--data", filepath.Join(root, "none")}, nil,
			"hymenoptera_data.zip), --train and --val (SageMaker: the train and val channels), or --synthetic to train on generated pictures"},
		{"synthetic and a channel", []string{"--synthetic", "--train", tiny}, nil, "--synthetic generates its own pictures: leave out --data, --train and --val"},
		{"synthetic and --data", []string{"--synthetic", "--data", root}, nil, "--synthetic generates its own pictures: leave out --data"},
		{"no val", []string{"--train", tiny, "--val", filepath.Join(root, "nope")}, nil, "the validation images"},
		{"other classes", []string{"--data", otherClasses}, nil, `has classes ["ants" "bees"] but ` + filepath.Join(otherClasses, "val") + ` has ["ants" "wasps"]`},
		{"a .pth file", []string{"--data", root, "--pretrained", pth}, nil, "this is a PyTorch file (torch.save's .pth/.pt format), not safetensors; convert its state dict once with"},
		{"missing weights", []string{"--data", root, "--pretrained", filepath.Join(root, "none.safetensors")}, nil, "no such file"},
		{"model dir is a file", []string{"--data", root, "--model-dir", notADir}, nil, "--model-dir"},
		{"fewer images than a batch", []string{"--data", root, "--spawn", "--batch-size", "4", "--image-size", "32"}, nil, "each of the 2 replicas reads 2 of the 4 training samples, less than one batch of 4: no step would run"},
		{"corrupt image", []string{"--data", corrupt, "--spawn", "--batch-size", "1", "--image-size", "32"}, nil, filepath.Join("ants", "ants_0.jpg") + ": unreadable image"},
		{"tiny images", []string{"--image-size", "16"}, nil, "--image-size=16"},
		{"micro-shard not dividing", []string{"--deterministic", "--batch-size", "4", "--micro-shard", "3"}, nil, "does not divide the global batch of 4"},
		{"zero epochs", []string{"--epochs", "0"}, nil, "must be positive"},
		{"momentum 1", []string{"--momentum", "1"}, nil, "--momentum=1"},
		{"NaN lr", []string{"--lr", "NaN"}, nil, "--lr=NaN"},
		{"checkpoint over the model", []string{"--model-dir", root, "--checkpoint", filepath.Join(root, "resnet18.safetensors")}, nil, "is where the fine-tuned model goes (--model-dir)"},
		{"resume without checkpoint", []string{"--resume"}, nil, "--resume needs --checkpoint"},
		{"argument", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"misspelt hyperparameter", nil, map[string]string{"SM_HPS": `{"epoch": 2}`}, `$SM_HPS: hyperparameter "epoch" is not a flag of finetune`},
		{"half-written SM_HPS", nil, map[string]string{"SM_HPS": `{"epochs": `}, "want a JSON object of hyperparameters"},
		{"empty channel", nil, map[string]string{"SM_CHANNEL_TRAIN": t.TempDir()}, "no class directories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := run(t.Context(), tc.args, &bytes.Buffer{})
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestSyntheticNeedsNoDownload: --synthetic's pictures open as the
// tutorial's folders do (two classes, 60 and 30 pictures each), and the
// directory is gone once the run ends.
func TestSyntheticNeedsNoDownload(t *testing.T) {
	c, err := parse([]string{"--synthetic"}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	remove, err := writeSynthetic(&c, &out)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "training on generated pictures of ants and bees (--synthetic): 60 of each class, 30 to validate")
	train, val, err := folders(c)
	require.NoError(t, err)
	assert.Equal(t, []string{"ants", "bees"}, train.Classes())
	assert.Equal(t, []int{120, 60}, []int{train.Len(), val.Len()})
	remove()
	assert.NoDirExists(t, filepath.Dir(c.trainDir))
}

// TestLongSyntheticTrains: the README's finetune line with --synthetic
// instead of the tutorial's download trains (a few steps, on small
// crops) and validates on the generated ants and bees.
func TestLongSyntheticTrains(t *testing.T) {
	exampletest.CleanEnv(t)
	var out bytes.Buffer
	res, err := run(t.Context(), []string{"--spawn", "--synthetic", "--epochs", "1", "--max-steps", "2", "--image-size", "32"}, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, []string{"ants", "bees"}, res.Classes)
	assert.False(t, math.IsNaN(res.FinalLoss), "a finite loss")
}

// TestLongPreemptedResumesBitIdentical: SIGTERM to ddprun (2 ranks, random
// crops and flips, BatchNorm) at a random step of the second epoch: exit
// 75; the same command again resumes mid-epoch and ends with the
// uninterrupted run's weights, bit for bit.
// Three trials at different moments; then three kill -9s of a random
// rank under --max_restarts=2, restarted from the last periodic
// checkpoint to the same bits.
func TestLongPreemptedResumesBitIdentical(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	exampletest.ImageFolder(t, dir, 24)
	job := exampletest.Job{Name: "finetune", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--data", dir, "--image-size", "32",
		"--lr", "0.01", "--epochs", "2", "--log-interval", "1", "--checkpoint-every", "2"}}
	want := job.Weights(t)
	job.Trials(t, 3, want, exampletest.Marks("epoch 2/2 step %d/6", 1, 2, 3)) // three steps left after the last: the moment drawn falls before the end
}
