package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/xla"
)

func TestMain(m *testing.M) { exampletest.Main(m, "linear", main) }

var lossLine = regexp.MustCompile(`loss over the 100 samples: (\d+\.\d+) before training, (\d+\.\d+) after`)

// launched runs 2 ranks under a launcher and returns rank 0's dataset
// loss before and after training, and the output.
func launched(t *testing.T, args []string, launcher ...string) (before, after float64, out string) {
	t.Helper()
	cmd := exec.Command(launcher[0], append(launcher[1:], exampletest.Self()...)...)
	cmd.Env = append(append(os.Environ(), exampletest.Env("linear", args...)...), "RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
		xla.EnvCacheDir+"="+t.TempDir())
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	m := lossLine.FindSubmatch(b)
	require.NotNil(t, m, "%s", b)
	before, _ = strconv.ParseFloat(string(m[1]), 64)
	after, _ = strconv.ParseFloat(string(m[2]), 64)
	return before, after, string(b)
}

// TestLearnsInEveryLaunchMode trains the linear model as 2 ranks under
// ddprun and under mpirun, and as 2 spawned replicas: each rank prints the
// seed's sizes (its half of the global batch of 30), the loss over the
// whole dataset falls by more than 0.2 (1.39 to about 1.06), and the three
// runs agree.
func TestLearnsInEveryLaunchMode(t *testing.T) {
	before, after, out := launched(t, nil, exampletest.Ddprun(t), "--nproc_per_node=2")
	assert.Less(t, after, before-0.2, out)
	for _, rank := range []string{"0", "1"} {
		assert.Contains(t, out, "[rank"+rank+"]:rank "+rank+": In Model: input size [15 5] output size [15 2]")
		assert.Contains(t, out, "[rank"+rank+"]:rank "+rank+": Outside: input size [15 5] output_size [15 2]")
	}
	t.Run("mpirun", func(t *testing.T) {
		mb, ma, out := launched(t, nil, exampletest.Mpirun(t), "--allow-run-as-root", "--oversubscribe", "-np", "2")
		assert.InDelta(t, before, mb, 1e-4, out)
		assert.InDelta(t, after, ma, 1e-4, out)
	})

	t.Setenv(xla.EnvCacheDir, t.TempDir())
	var buf bytes.Buffer
	res, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "2"}, &buf)
	require.NoError(t, err, buf.String())
	assert.InDelta(t, before, res.Before, 1e-4)
	assert.InDelta(t, after, res.After, 1e-2, "spawned replicas average in-graph: the same training up to rounding")
	assert.Len(t, res.EpochLosses, 5)
	assert.Contains(t, buf.String(), "rank 1: In Model: input size [15 5] output size [15 2]")
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--epochs", "0"}, "must be positive"},
		{[]string{"--batch-size", "-1"}, "must be positive"},
		{[]string{"--lr", "NaN"}, "--lr=NaN"},
		{[]string{"more"}, `unexpected argument "more"`},
		{[]string{"--spawn", "--device", "tpu"}, `"tpu"`},
		{[]string{"--spawn", "--batch-size", "101"}, "--batch-size=101: larger than the 100 samples of the dataset"},
		{[]string{"--spawn", "--deterministic", "--micro-shard", "7"}, "does not divide the global batch of 30"},
		{[]string{"--spawn", "--deterministic", "--micro-shard", "0"}, "want a sample count of at least 1"},
		{[]string{"--spawn", "--micro-shard", "5"}, "--micro-shard 5 without --deterministic"},
	} {
		_, err := run(context.Background(), tc.args, &bytes.Buffer{})
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

// TestCheckpointResumePlotAndMetrics: the shared training flags. A run
// of 2 epochs checkpoints, draws its curve and prints the metrics; a
// resumed run continues at epoch 3 and ends where 5 uninterrupted epochs
// end.
func TestCheckpointResumePlotAndMetrics(t *testing.T) {
	exampletest.CleanEnv(t)
	dir := t.TempDir()
	ckpt, plot := filepath.Join(dir, "linear.safetensors"), filepath.Join(dir, "linear.png")
	var buf bytes.Buffer
	whole, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "2", "--epochs", "5"}, &buf)
	require.NoError(t, err, buf.String())
	buf.Reset()
	first, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "2", "--epochs", "2", "--checkpoint", ckpt, "--plot", plot, "--metrics"}, &buf)
	require.NoError(t, err, buf.String())
	assert.Len(t, first.EpochLosses, 2)
	assert.FileExists(t, ckpt)
	assert.FileExists(t, plot)
	assert.Contains(t, buf.String(), "Compilations")
	buf.Reset()
	resumed, err := run(t.Context(), []string{"--spawn", "--cpu-devices", "2", "--epochs", "5", "--checkpoint", ckpt, "--resume"}, &buf)
	require.NoError(t, err, buf.String())
	assert.Len(t, resumed.EpochLosses, 3, "epochs 3 to 5")
	assert.NotContains(t, buf.String(), "epoch 2:")
	assert.InDelta(t, whole.After, resumed.After, 1e-6)
	_, err = run(t.Context(), []string{"--spawn", "--max-steps", "-1"}, &buf)
	assert.ErrorContains(t, err, "--max-steps=-1")
}

// TestLongPreemptedResumesBitIdentical: SIGTERM to ddprun (2 ranks, a partial
// last batch each epoch) at a random step: exit 75; the same command
// again resumes and ends with the uninterrupted run's weights, bit for
// bit.
// Three trials at different moments; then three kill -9s of a random
// rank under --max_restarts=2, restarted from the last periodic
// checkpoint to the same bits.
func TestLongPreemptedResumesBitIdentical(t *testing.T) {
	exampletest.CleanEnv(t)
	job := exampletest.Job{Name: "linear", Launch: []string{"--nproc_per_node=2"}, Args: []string{"--epochs", "400", "--checkpoint-every", "5"}}
	want := job.Weights(t)
	job.Trials(t, 3, want, exampletest.Marks("epoch %d:", 10, 30, 60, 100, 150, 200))
}
