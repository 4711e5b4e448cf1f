package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, "collectives", main) }

// launched runs the demo under a launcher and returns its lines sorted,
// without ddprun's [rankN]: prefixes.
func launched(t *testing.T, args []string, launcher ...string) []string {
	t.Helper()
	cmd := exec.Command(launcher[0], append(launcher[1:], exampletest.Self()...)...)
	cmd.Env = append(append(os.Environ(), exampletest.Env("collectives", args...)...), "RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if rest, ok := strings.CutPrefix(l, "[rank"); ok {
			_, l, _ = strings.Cut(rest, "]:")
		}
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return lines
}

// The seed demo's results, worked out by hand: ranks hold 1..n, so the
// average is (n+1)/2.
var wantFour = []string{
	"Rank 0 gathered [1 2 3 4], average 2.5",
	"Rank 0 has [42] after the broadcast from rank 0",
	"Rank 0 received the average 2.5",
	"Rank 0 sent [1] to rank 1",
	"Rank 1 has [42] after the broadcast from rank 0",
	"Rank 1 has data [1]",
	"Rank 1 received the average 2.5",
	"Rank 2 has [42] after the broadcast from rank 0",
	"Rank 2 received the average 2.5",
	"Rank 3 has [42] after the broadcast from rank 0",
	"Rank 3 received the average 2.5",
}

// TestSeedDemoUnderDdprunAndMpirun: 4 ranks under ddprun and under
// Open MPI's mpirun print the seed's results; one rank skips the send.
func TestSeedDemoUnderDdprunAndMpirun(t *testing.T) {
	ddprun := exampletest.Ddprun(t)
	assert.Equal(t, wantFour, launched(t, nil, ddprun, "--nproc_per_node=4"), "ddprun")
	assert.Equal(t, []string{
		"Rank 0 gathered [1], average 1",
		"Rank 0 has [42] after the broadcast from rank 0",
		"Rank 0 received the average 1",
	}, launched(t, nil, ddprun, "--nproc_per_node=1"), "one rank")
	t.Run("mpirun", func(t *testing.T) {
		assert.Equal(t, wantFour, launched(t, nil, exampletest.Mpirun(t), "--allow-run-as-root", "--oversubscribe", "-np", "4"))
	})
}

// TestNeedsALauncher: run alone, or with a bad init method, it says what
// is missing.
func TestNeedsALauncher(t *testing.T) {
	for _, k := range []string{"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"} {
		t.Setenv(k, "")
	}
	var out bytes.Buffer
	assert.ErrorContains(t, run(context.Background(), nil, &out), "RANK is not set: no launcher started this process: start it with ddprun, torchrun or mpirun")
	assert.ErrorContains(t, run(context.Background(), []string{"--init-method", "mpi://"}, &out), "want env://")
	assert.ErrorContains(t, run(context.Background(), []string{"--backend", "nccl"}, &out), `backend "nccl": want tcp (the default) or mpi`)
}
