package sagemaker

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla/data"
)

// build compiles ddprun and the MNIST example into one bin directory.
func build(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, pkg := range []string{"github.com/xladdp/xladdp/ddp/cmd/ddprun", "github.com/xladdp/xladdp/examples/mnist"} {
		out, err := exec.Command("go", "build", "-o", bin+"/", pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return bin
}

// sageMakerEnv is what SageMaker gives the entry point on a one-instance
// CPU job (the notebook's estimator with instance_count=1), with the
// training channel holding MNIST.
func sageMakerEnv(t *testing.T, bin, modelDir string) []string {
	return append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"XLADDP_PROGRAM="+filepath.Join(bin, "mnist"),
		`SM_HOSTS=["localhost"]`, "SM_CURRENT_HOST=localhost", "SM_NUM_GPUS=0", "SM_NUM_CPUS=2",
		"SM_CHANNEL_TRAINING="+data.DefaultMNISTDir(), "SM_MODEL_DIR="+modelDir,
		`SM_HPS={"max-steps": 30, "test-batch-size": 2000}`,
		"PET_NPROC_PER_NODE=2", "RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "XLADDP_CACHE_DIR="+t.TempDir())
}

// TestEntryPointTrains runs the entry point as SageMaker does, with the
// hyperparameters as arguments: ddprun takes the single host from
// SM_HOSTS, starts 2 workers, the CNN learns from the training channel
// and rank 0 writes the model into SM_MODEL_DIR.
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
