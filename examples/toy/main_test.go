package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "toy", main) }

var lossLine = regexp.MustCompile(`Loss after step (\d+): (\d+\.\d{4})`)

// losses runs the program (alone, or under a ddprun built for the test)
// and returns rank 0's printed losses.
func losses(t *testing.T, ddprun string, args ...string) ([]float64, string, error) {
	t.Helper()
	self := exampletest.Self()
	var cmd *exec.Cmd
	if ddprun != "" {
		cmd = exec.Command(ddprun, append([]string{"--nproc_per_node=2"}, self...)...)
	} else {
		cmd = exec.Command(self[0], self[1:]...)
	}
	cmd.Env = append(append(os.Environ(), exampletest.Env("toy", args...)...),
		"RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "NEURON_NUM_DEVICES=", "XLADDP_DEVICE=", "PJRT_DEVICE=")
	out, err := cmd.CombinedOutput()
	var got []float64
	first := 0
	for _, m := range lossLine.FindAllStringSubmatch(string(out), -1) {
		step, _ := strconv.Atoi(m[1])
		if first == 0 {
			first = step
		}
		require.Equal(t, first+10*len(got), step, "every 10 steps: %s", out)
		v, _ := strconv.ParseFloat(m[2], 64)
		got = append(got, v)
	}
	return got, string(out), err
}

// TestToyInEveryLaunchMode runs the tutorial's program spawned on 2 CPU
// devices, as 2 ranks under ddprun (env://), and as 2 ranks meeting
// through a file:// init method. Rank 0 prints the loss every 10 steps;
// the three runs compute the same training (same initial model from rank
// 0, same per-rank data), so their losses agree to 1e-3. The toy draws
// fresh noise every step, so its loss does not trend down (nor in the
// tutorial); the agreement is the check.
func TestToyInEveryLaunchMode(t *testing.T) {
	ddprun := exampletest.Ddprun(t)
	spawned, out, err := losses(t, "", "--spawn", "--cpu-devices", "2")
	require.NoError(t, err, out)
	require.Len(t, spawned, 10, out)
	for _, mode := range [][]string{nil, {"--init-method", "file://" + filepath.Join(t.TempDir(), "init")}} {
		ranks, out, err := losses(t, ddprun, mode...)
		require.NoError(t, err, out)
		require.Len(t, ranks, 10, out)
		assert.InDeltaSlice(t, spawned, ranks, 1e-3, "%v: %s", mode, out)
		assert.Equal(t, 10, strings.Count(out, "[rank0]:Loss after step"), "only rank 0 prints")
	}
}

// TestToyRefusesBadLaunches: a bad target, init method or missing launcher
// is a message, never a hang.
func TestToyRefusesBadLaunches(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--spawn", "--device", "tpu"}, `unknown device target "tpu"`},
		{[]string{"--init-method", "ftp://x"}, "ftp://x"},
		{nil, "no launcher started this process: use --spawn (one process, a replica per local device), or start it with ddprun, torchrun or mpirun"},
		{[]string{"--spawn", "--cpu-devices", "0"}, "want a count from 1 to"},
	}
	for _, c := range cases {
		_, out, err := losses(t, "", c.args...)
		assert.Error(t, err, "%v", c.args)
		assert.Contains(t, out, c.want, "%v", c.args)
	}
}

// TestSharedFlags: the toy takes the examples' shared flags: --seed makes
// a run repeatable (and another seed another run), --max-steps with
// --checkpoint stops and saves, --resume continues from the saved step,
// --plot draws the curve and --metrics prints xla's metrics.
func TestSharedFlags(t *testing.T) {
	dir := t.TempDir()
	ckpt, plot := filepath.Join(dir, "toy.safetensors"), filepath.Join(dir, "toy.png")
	spawn := []string{"--spawn", "--cpu-devices", "2"}
	a, out, err := losses(t, "", append(spawn, "--seed", "7")...)
	require.NoError(t, err, out)
	b, out, err := losses(t, "", append(spawn, "--seed", "7")...)
	require.NoError(t, err, out)
	c, out, err := losses(t, "", append(spawn, "--seed", "8")...)
	require.NoError(t, err, out)
	assert.Equal(t, a, b, "the same seed, the same run")
	assert.NotEqual(t, a, c, "another seed, another run")

	first, out, err := losses(t, "", append(spawn, "--seed", "7", "--max-steps", "50", "--checkpoint", ckpt)...)
	require.NoError(t, err, out)
	assert.Equal(t, a[:5], first, "the first 50 steps")
	assert.FileExists(t, ckpt)
	rest, out, err := losses(t, "", append(spawn, "--seed", "7", "--checkpoint", ckpt, "--resume", "--plot", plot, "--metrics")...)
	require.NoError(t, err, out)
	assert.Len(t, rest, 5, "steps 60 to 100")
	assert.Contains(t, out, "Loss after step 60:")
	assert.Contains(t, out, "Compilations")
	assert.FileExists(t, plot)
}
