package zero_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
)

// zeroCase is one layout the ZeRO equivalence tests train twice, with the
// plain optimizer and sharded.
type zeroCase struct {
	kind, optimizer           string
	processes, devices, micro int
	steps                     int
	wrap                      string // extra Wrap options for both runs
	shmOff                    bool
	rankOrder                 bool // mpi: XLADDP_MPI_REDUCE_ORDER=rank
}

// zeroTolerance is the acceptance's bound: every loss and every final
// weight of the sharded run equal the plain wrapper's to 1e-6 relative
// (each loss to itself, each parameter tensor to its largest magnitude).
const zeroTolerance = 1e-6

// TestZeroEqualsWrap: ZeroRedundancyOptimizer trains every test model to
// the losses and weights the plain wrapper reaches, in every layout:
// in-graph (local replicas), across processes (tcp with shared memory and
// without), and both (2×2), for SGD (plain, momentum, Nesterov), Adam,
// AdamW with decay groups and clipping (the GPT) and Adadelta, on bucket
// lengths that do not divide the replica count (the toy's 165
// parameters over 2 and 4 replicas). TestLongZeroEqualsWrap runs 200 steps.
func TestZeroEqualsWrap(t *testing.T) {
	runZeroEquivalence(t, []zeroCase{
		{kind: "toy", optimizer: "adam", processes: 1, devices: 3, micro: 1},
		{kind: "toy", optimizer: "adadelta", processes: 3, devices: 1, micro: 1},
		{kind: "toy", optimizer: "nesterov", processes: 2, devices: 2, micro: 2},
		{kind: "toy", optimizer: "adamw", processes: 4, devices: 1, micro: 1, wrap: "bucket=0.0002"},
		{kind: "cnn", processes: 2, devices: 1, micro: 1},
	})
}

// TestLongZeroEqualsWrap: 200 steps of the GPT (AdamW groups, clipping,
// warmup+cosine) and the CNN, sharded over 2, 3 and 4 replicas in-graph,
// across processes (tcp with and without shared memory) and 2×2.
func TestLongZeroEqualsWrap(t *testing.T) {
	var cases []zeroCase
	for _, kind := range []string{"gpt", "cnn"} {
		for _, layout := range [][2]int{{1, 2}, {1, 3}, {1, 4}, {2, 1}, {3, 1}, {4, 1}, {2, 2}} {
			cases = append(cases, zeroCase{kind: kind, processes: layout[0], devices: layout[1], micro: 1, steps: 200})
		}
		cases = append(cases, zeroCase{kind: kind, processes: 3, devices: 1, micro: 1, steps: 200, shmOff: true})
	}
	runZeroEquivalence(t, cases)
}

// runZeroEquivalence trains each case plain and sharded and compares them.
func runZeroEquivalence(t *testing.T, cases []zeroCase) {
	for _, c := range cases {
		steps := c.steps
		if steps == 0 {
			steps = ddptest.EquivalenceSteps
		}
		name := fmt.Sprintf("%s/%s/%dx%d/micro%d/%d/%s", c.kind, c.optimizer, c.processes, c.devices, c.micro, steps, c.wrap)
		t.Run(name, func(t *testing.T) {
			env := []string{"XLADDP_TEST_TIMEOUT=120s", "XLADDP_TEST_MODEL=" + c.kind, "XLADDP_TEST_OPTIM=" + c.optimizer,
				"XLADDP_TEST_DEVICES=" + strconv.Itoa(c.devices), "XLADDP_TEST_MICRO=" + strconv.Itoa(c.micro),
				"XLADDP_TEST_STEPS=" + strconv.Itoa(steps), "XLADDP_TEST_LOSSES=1"}
			if c.shmOff {
				env = append(env, dist.EnvShmMiB+"=0")
			}
			run := func(wrap string) []ddptest.Report {
				cmds, outs := ddptest.Launch(t, "equivalence", c.processes, append(env, "XLADDP_TEST_WRAP="+wrap)...)
				reps := ddptest.WaitReports(t, cmds, outs)
				for r, rep := range reps {
					require.Empty(t, rep.Error, "rank %d (%s)", r, wrap)
				}
				return reps
			}
			plain, sharded := run(c.wrap), run(c.wrap+",zero")
			assertZeroEqual(t, plain, sharded, steps)
		})
	}
}

// assertZeroEqual compares a plain run's reports with a sharded run's:
// every rank's losses, rank 0's weights, one gradient sync per step, and
// every replica of the sharded run bit-identical.
func assertZeroEqual(t *testing.T, plain, sharded []ddptest.Report, steps int) {
	t.Helper()
	first := ""
	for r, rep := range sharded {
		assert.EqualValues(t, steps, rep.Counters["gradient syncs"], "rank %d", r)
		delete(rep.Hashes, "step traces")
		for replica, h := range rep.Hashes {
			if first == "" {
				first = h
			}
			assert.Equal(t, first, h, "%s differs from replica 0", replica)
		}
		require.Len(t, rep.Losses, steps, "rank %d", r)
		for s, want := range plain[r].Losses {
			got := rep.Losses[s]
			assert.LessOrEqual(t, math.Abs(float64(got-want)), zeroTolerance*math.Abs(float64(want)),
				"rank %d: loss of step %d: plain %v, sharded %v", r, s, want, got)
		}
	}
	want, got := plain[0].Params, sharded[0].Params
	require.Len(t, got, len(want))
	for i := range want {
		require.Len(t, got[i], len(want[i]))
		scale, worst := 0.0, 0.0
		for j := range want[i] {
			scale = math.Max(scale, math.Abs(float64(want[i][j])))
			worst = math.Max(worst, math.Abs(float64(got[i][j]-want[i][j])))
		}
		assert.LessOrEqual(t, worst, zeroTolerance*scale, "parameter %d: largest difference %g of largest magnitude %g", i, worst, scale)
	}
}
