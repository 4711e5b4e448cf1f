//go:build mpi

package zero_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
)

// TestMPIZeroEqualsWrap: on the mpi backend (MPI_Reduce_scatter and
// MPI_Allgather under the host path) the sharded optimizer trains to the
// plain wrapper's losses and weights, 1e-6 relative, every replica
// bit-identical: Adam on the toy at 2 ranks, Nesterov at 2×2 with 2
// micro-batches, the CNN at 3 ranks and the GPT (AdamW groups, clipping)
// at 2, and AdamW on the toy at 4 ranks in rank order. TestLongMPIZeroEqualsWrap runs 200
// steps at 2, 3 and 4 and 2×2.
//
// At 4 ranks Open MPI's MPI_Allreduce and MPI_Reduce_scatter_block add the
// ranks' values in different orders, so the plain and the sharded runs
// round apart in the last bit and 200 GPT steps grow that to 5e-3; with
// XLADDP_MPI_REDUCE_ORDER=rank both sum in rank order (as the tcp backend
// does) and agree bit for bit. The cases at 4 ranks run in that order.
func TestMPIZeroEqualsWrap(t *testing.T) {
	runMPIZeroEquivalence(t, []zeroCase{
		{kind: "toy", optimizer: "adam", processes: 2, devices: 1, micro: 1},
		{kind: "toy", optimizer: "nesterov", processes: 2, devices: 2, micro: 2},
		{kind: "cnn", processes: 3, devices: 1, micro: 1},
		{kind: "gpt", processes: 2, devices: 1, micro: 1},
		{kind: "toy", optimizer: "adamw", processes: 4, devices: 1, micro: 1, rankOrder: true},
	})
}

func TestLongMPIZeroEqualsWrap(t *testing.T) {
	var cases []zeroCase
	for _, kind := range []string{"gpt", "cnn"} {
		for _, layout := range [][2]int{{2, 1}, {3, 1}, {4, 1}, {2, 2}} {
			cases = append(cases, zeroCase{kind: kind, processes: layout[0], devices: layout[1], micro: 1, steps: 200,
				rankOrder: layout[0] == 4})
		}
	}
	runMPIZeroEquivalence(t, cases)
}

// runMPIZeroEquivalence is runZeroEquivalence under mpirun.
func runMPIZeroEquivalence(t *testing.T, cases []zeroCase) {
	for _, c := range cases {
		steps := c.steps
		if steps == 0 {
			steps = ddptest.EquivalenceSteps
		}
		order := "mpi"
		if c.rankOrder {
			order = "rank"
		}
		t.Run(fmt.Sprintf("%s/%s/%dx%d/micro%d/%d/%s-order", c.kind, c.optimizer, c.processes, c.devices, c.micro, steps, order), func(t *testing.T) {
			run := func(wrap string) []ddptest.Report {
				res := workertest.MPIRun(t, 5*time.Minute, "equivalence", c.processes, nil, "XLADDP_TEST_TIMEOUT=120s", dist.EnvMPIReduceOrder+"="+order,
					"XLADDP_TEST_MODEL="+c.kind, "XLADDP_TEST_OPTIM="+c.optimizer, "XLADDP_TEST_WRAP="+wrap,
					"XLADDP_TEST_DEVICES="+strconv.Itoa(c.devices), "XLADDP_TEST_MICRO="+strconv.Itoa(c.micro),
					"XLADDP_TEST_STEPS="+strconv.Itoa(steps), "XLADDP_TEST_LOSSES=1")
				workertest.RequireClean(t, res)
				reps := make([]ddptest.Report, len(res.Reps))
				for r, rep := range res.Reps {
					reps[r] = *rep
				}
				return reps
			}
			plain, sharded := run(""), run("zero")
			assertZeroEqual(t, plain, sharded, steps)
		})
	}
}
