package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "finetune", main) }

// writeFolder writes an ants/bees ImageFolder: train/ with perClass
// images and val/ with half as many, of random sizes (36 to 71 pixels a
// side), JPEG and PNG. Ants are dark red with noise, bees yellow with
// black vertical stripes, so a network can tell them apart from any crop.
func writeFolder(t *testing.T, root string, perClass int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	draw := func(class string) image.Image {
		w, h := 36+rng.IntN(36), 36+rng.IntN(36)
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		period := 6 + rng.IntN(6)
		for y := range h {
			for x := range w {
				n := rng.IntN(50)
				c := color.RGBA{uint8(120 + n), uint8(30 + n), uint8(20 + n), 255}
				if class == "bees" {
					c = color.RGBA{uint8(200 + n), uint8(170 + n), uint8(20 + n), 255}
					if x%period < period/2 {
						c = color.RGBA{uint8(n), uint8(n), uint8(n), 255}
					}
				}
				img.Set(x, y, c)
			}
		}
		return img
	}
	for split, n := range map[string]int{"train": perClass, "val": perClass / 2} {
		for _, class := range []string{"ants", "bees"} {
			dir := filepath.Join(root, split, class)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for i := range n {
				var b bytes.Buffer
				name := fmt.Sprintf("%s_%d.png", class, i)
				if i%2 == 0 {
					name = fmt.Sprintf("%s_%d.jpg", class, i)
					require.NoError(t, jpeg.Encode(&b, draw(class), &jpeg.Options{Quality: 90}))
				} else {
					require.NoError(t, png.Encode(&b, draw(class)))
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644))
			}
		}
	}
}

// TestLearnsUnderSageMakerThenFineTunesUnderDdprun is the notebook's
// path end to end on a fixture folder (chance: 50%):
//  1. under a SageMaker environment alone (channels, hyperparameters,
//     model directory; no data flags), 2 spawned replicas train from
//     scratch for 4 epochs of 6 steps at 32×32 and pass 90% val accuracy;
//     the model, its classes, the checkpoint and the plot are written;
//  2. as 2 ranks under ddprun, that model is the --pretrained backbone: fc
//     is replaced, and 2 steps pass 90% again (from scratch 6 steps gave
//     50%: the backbone is what knows the classes);
//  3. --resume continues from the checkpoint at epoch 5, and refuses the
//     checkpoint for a folder of other classes.
func TestLearnsUnderSageMakerThenFineTunesUnderDdprun(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	writeFolder(t, dir, 24)
	modelDir, ckpt, plot := filepath.Join(dir, "model"), filepath.Join(dir, "ckpt.safetensors"), filepath.Join(dir, "curves.png")
	t.Setenv("SM_CHANNEL_TRAIN", filepath.Join(dir, "train"))
	t.Setenv("SM_CHANNEL_VAL", filepath.Join(dir, "val"))
	t.Setenv("SM_MODEL_DIR", modelDir)
	t.Setenv("SM_HPS", `{"epochs": 4, "lr": 0.01, "image_size": 32, "sagemaker_program": "finetune"}`)
	var out bytes.Buffer
	res, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "2", "--checkpoint", ckpt, "--plot", plot, "--log-interval", "3"}, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, []string{"ants", "bees"}, res.Classes)
	assert.Equal(t, 4, res.Epochs)
	assert.Greater(t, res.Accuracy, 0.9, out.String())
	assert.Contains(t, out.String(), "from scratch")
	assert.Contains(t, out.String(), "6 steps of 4 per replica an epoch, 32×32 crops, SGD lr 0.01")
	assert.FileExists(t, plot)
	assert.FileExists(t, ckpt)
	model := filepath.Join(modelDir, "model.safetensors")
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
	res, err = run(t.Context(), []string{"--spawn", "--data", dir, "--image-size", "32", "--epochs", "5", "--checkpoint", ckpt, "--resume"}, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, 4, res.ResumedAt)
	assert.Equal(t, 5, res.Epochs)
	assert.NotContains(t, out.String(), "epoch 4:")
	assert.Contains(t, out.String(), "epoch 5: val accuracy")

	other := filepath.Join(t.TempDir(), "other")
	for _, split := range []string{"train", "val"} {
		require.NoError(t, os.MkdirAll(filepath.Join(other, split), 0o755))
		for from, to := range map[string]string{"ants": "wasps", "bees": "bees"} {
			require.NoError(t, os.Symlink(filepath.Join(dir, split, from), filepath.Join(other, split, to)))
		}
	}
	_, err = run(t.Context(), []string{"--spawn", "--data", other, "--image-size", "32", "--epochs", "5", "--checkpoint", ckpt, "--resume"}, &bytes.Buffer{})
	assert.ErrorContains(t, err, `was trained on the classes ["ants","bees"], not this folder's ["bees","wasps"]`)
}
