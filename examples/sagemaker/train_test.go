package sagemaker

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// build compiles ddprun and the MNIST and fine-tuning examples into one
// bin directory.
func build(t *testing.T) string {
	t.Helper()
	paths := exampletest.Build(t, exampletest.DdprunPackage, "github.com/xladdp/xladdp/examples/mnist",
		"github.com/xladdp/xladdp/examples/finetune")
	return filepath.Dir(paths[exampletest.DdprunPackage])
}

func TestMain(m *testing.M) { exampletest.Main(m, "", nil) }

// sageMakerEnv is what SageMaker gives the entry point on a one-instance
// CPU job (the notebook's estimator with instance_count=1), with the
// training channel holding MNIST's first 2048 training and 1000 test
// digits.
func sageMakerEnv(t *testing.T, bin, modelDir string) []string {
	t.Helper()
	return append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"XLADDP_PROGRAM="+filepath.Join(bin, "mnist"),
		`SM_HOSTS=["localhost"]`, "SM_CURRENT_HOST=localhost", "SM_NUM_GPUS=0", "SM_NUM_CPUS=2",
		"SM_CHANNEL_TRAINING="+exampletest.MNISTSubset(t, 2048, 1000), "SM_MODEL_DIR="+modelDir,
		`SM_HPS={"max-steps": 30, "test-batch-size": 2000}`,
		"PET_NPROC_PER_NODE=2", "RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "XLADDP_CACHE_DIR="+t.TempDir(),
		"XLADDP_CHECKPOINT_DIR="+filepath.Join(t.TempDir(), "checkpoints"))
}

// TestEntryPointTrains runs the entry point as SageMaker does, with the
// hyperparameters as arguments: ddprun takes the single host from
// SM_HOSTS, starts 2 workers (2 ranks in 2 processes: the README's
// ddprun run of mnist), the CNN learns from the training channel, rank 0
// alone reports, with its step's time split, and writes the model into
// SM_MODEL_DIR.
func TestEntryPointTrains(t *testing.T) {
	bin, model := build(t), t.TempDir()
	cmd := exec.Command("./train", "--max-steps", "30", "--test-batch-size", "2000")
	cmd.Env = sageMakerEnv(t, bin, model)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`\[rank0\]:epoch 1: test accuracy (\d+\.\d+)%`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	acc, _ := strconv.ParseFloat(string(m[1]), 64)
	assert.Greater(t, acc, 80.0, "%s", out)
	assert.Contains(t, string(out), "on 2 replicas")
	assert.NotContains(t, string(out), "[rank1]:epoch 1", "rank 0 alone reports")
	// No optimizer phase: on the host path the update runs inside the
	// next step's program.
	assert.Regexp(t, `\[rank0\]:time per step over 30 steps: data \S+ ms, trace \S+ ms, execute \S+ ms, download \S+ ms, all-reduce \S+ ms, upload \S+ ms, loss read \S+ ms = \S+ ms; Go heap \d+ allocations \(\d+ KiB\) per step; the loader's workers assembled and uploaded each batch in \S+, beside the steps`, string(out))
	assert.FileExists(t, filepath.Join(model, "model.safetensors"))
}

// TestEntryPointFailsTheJob: a bad hyperparameter fails every worker, and
// the entry point exits non-zero (what makes SageMaker mark the job
// failed), naming the cause.
func TestEntryPointFailsTheJob(t *testing.T) {
	bin := build(t)
	cmd := exec.Command("./train", "--epochs", "0")
	cmd.Env = sageMakerEnv(t, bin, t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.NotZero(t, exit.ExitCode())
	assert.Contains(t, string(out), "--epochs, --batch-size, --test-batch-size and --log-interval must be positive")
}

// TestLongEntryPointFineTunes runs the notebook's own task through the same
// entry point: XLADDP_PROGRAM is the fine-tuning example, the train and
// val channels hold an ants/bees folder, and both the entry point's
// checkpoint (model.safetensors) and the fine-tuned model
// (resnet18.safetensors) land in SM_MODEL_DIR. ResNet-18's compile makes
// it a make test-long test.
func TestLongEntryPointFineTunes(t *testing.T) {
	bin, model, folder := build(t), t.TempDir(), t.TempDir()
	for _, split := range []struct {
		name string
		n    int
	}{{"train", 8}, {"val", 4}} {
		for class, c := range map[string]color.RGBA{"ants": {150, 50, 30, 255}, "bees": {220, 190, 30, 255}} {
			dir := filepath.Join(folder, split.name, class)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for i := range split.n {
				img := image.NewRGBA(image.Rect(0, 0, 40+i, 48))
				draw.Draw(img, img.Bounds(), image.NewUniform(c), image.Point{}, draw.Src)
				var b bytes.Buffer
				require.NoError(t, png.Encode(&b, img))
				require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.png", i)), b.Bytes(), 0o644))
			}
		}
	}
	cmd := exec.Command("./train", "--image-size", "32", "--epochs", "1", "--max-steps", "2")
	cmd.Env = append(sageMakerEnv(t, bin, model), "XLADDP_PROGRAM="+filepath.Join(bin, "finetune"),
		"SM_CHANNEL_TRAIN="+filepath.Join(folder, "train"), "SM_CHANNEL_VAL="+filepath.Join(folder, "val"), `SM_HPS={"lr": 0.01}`)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "[rank0]:epoch 1: val accuracy")
	assert.Contains(t, string(out), "SGD lr 0.01", "SM_HPS is read")
	assert.FileExists(t, filepath.Join(model, "model.safetensors"))
	assert.FileExists(t, filepath.Join(model, "resnet18.safetensors"))
}

// TestLongEntryPointPreemptedAndResumed: SageMaker stops the job (SIGTERM
// to the entry point, ddprun after its exec) at a random step: exit 75
// with a checkpoint in the checkpoint directory; the restarted job
// resumes from it and writes the model an uninterrupted job writes, bit
// for bit.
func TestLongEntryPointPreemptedAndResumed(t *testing.T) {
	bin := build(t)
	env := sageMakerEnv(t, bin, t.TempDir())
	cmd := exec.Command("./train", "--max-steps", "40", "--batch-size", "32", "--test-batch-size", "2000", "--checkpoint-every", "5", "--log-interval", "10")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	want := exampletest.ModelTensors(t, filepath.Join(envValue(env, "SM_MODEL_DIR"), "model.safetensors"))

	model := t.TempDir()
	env = append(sageMakerEnv(t, bin, model), "XLADDP_CHECKPOINT_DIR="+filepath.Join(t.TempDir(), "checkpoints"))
	cmd = exec.Command("./train", "--max-steps", "40", "--batch-size", "32", "--test-batch-size", "2000", "--checkpoint-every", "5", "--log-interval", "10")
	cmd.Env = env
	r := exampletest.Start(t, cmd)
	moment := r.Await(t, exampletest.Marks("step %d/40", 10, 20), rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)))
	stopped, err := r.Signal(t, syscall.SIGTERM)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", stopped)
	require.Equal(t, workerenv.ExitPreempted, exit.ExitCode(), "SIGTERM %s: %s", moment, stopped)

	cmd = exec.Command("./train", "--max-steps", "40", "--batch-size", "32", "--test-batch-size", "2000", "--checkpoint-every", "5", "--log-interval", "10")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "resumed from "+envValue(env, "XLADDP_CHECKPOINT_DIR"))
	assert.Equal(t, want, exampletest.ModelTensors(t, filepath.Join(model, "model.safetensors")), "SIGTERM %s", moment)
}

// envValue is the last value env gives name.
func envValue(env []string, name string) string {
	value := ""
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			value = v
		}
	}
	return value
}
