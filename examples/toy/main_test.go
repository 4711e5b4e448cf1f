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
)

// childEnv makes the test binary run the program with $XLADDP_TOY_ARGS.
const childEnv = "XLADDP_TOY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Args = append([]string{"toy"}, strings.Fields(os.Getenv("XLADDP_TOY_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var lossLine = regexp.MustCompile(`Loss after step (\d+): (\d+\.\d{4})`)

// losses runs the program (alone, or under a ddprun built for the test)
// and returns rank 0's printed losses.
func losses(t *testing.T, ddprun string, args ...string) ([]float64, string, error) {
	t.Helper()
	self := []string{os.Args[0], "-test.run=^$"}
	var cmd *exec.Cmd
	if ddprun != "" {
		cmd = exec.Command(ddprun, append([]string{"--nproc_per_node=2"}, self...)...)
	} else {
		cmd = exec.Command(self[0], self[1:]...)
	}
	cmd.Env = append(os.Environ(), childEnv+"=1", "XLADDP_TOY_ARGS="+strings.Join(args, " "),
		"RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "NEURON_NUM_DEVICES=", "XLADDP_DEVICE=", "PJRT_DEVICE=")
	out, err := cmd.CombinedOutput()
	var got []float64
	for _, m := range lossLine.FindAllStringSubmatch(string(out), -1) {
		step, _ := strconv.Atoi(m[1])
		require.Equal(t, 10*(len(got)+1), step, "%s", out)
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
	ddprun := filepath.Join(t.TempDir(), "ddprun")
	build := exec.Command("go", "build", "-o", ddprun, "github.com/xladdp/xladdp/ddp/cmd/ddprun")
	built, err := build.CombinedOutput()
	require.NoError(t, err, "%s", built)

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
		{nil, "RANK is not set"},
		{[]string{"--spawn", "--cpu-devices", "0"}, "want a count from 1 to"},
	}
	for _, c := range cases {
		_, out, err := losses(t, "", c.args...)
		assert.Error(t, err, "%v", c.args)
		assert.Contains(t, out, c.want, "%v", c.args)
	}
}
