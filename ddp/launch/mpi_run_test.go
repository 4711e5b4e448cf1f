//go:build mpi

package launch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRunOnTheMPIBackend: ddprun --backend=mpi starts the workers under
// mpirun, where they form their group through MPI; a worker's failure
// ends the job (after the restarts asked for), and
// a stopped ddprun stops every worker.
func TestRunOnTheMPIBackend(t *testing.T) {
	args := []string{"--backend=mpi", "--nproc_per_node=3"}
	t.Run("ok", func(t *testing.T) {
		mark := "mpiok" + strings.ReplaceAll(t.Name(), "/", "")
		res := runAgent(t.Context(), t, mark, "ok", args)
		assert.Equal(t, 0, res.code, res.stderr)
		assert.Equal(t, 3, strings.Count(res.stdout, "sum 3\n"), res.stdout)
		for _, line := range []string{"[rank0]:sum 3\n", "[rank1]:sum 3\n", "[rank2]:sum 3\n"} {
			assert.Contains(t, res.stdout, line, "each worker's line carries its rank, as on the tcp backend")
		}
		assertNothingLeft(t, mark, nil)
	})
	t.Run("failure with a restart", func(t *testing.T) {
		mark := "mpifail" + strings.ReplaceAll(t.Name(), "/", "")
		res := runAgent(t.Context(), t, mark, "fail", append(args, "--max_restarts=1"), "XLADDP_TEST_TIMEOUT=60s")
		assert.NotZero(t, res.code, res.stderr)
		assert.Equal(t, 2, strings.Count(res.stdout, "rank 1 gives up"), "two attempts: %s", res.stdout)
		assert.Contains(t, res.stderr, "restarting (restart 1 of 1)")
		// Rank 1 destroyed its group and exited: the others, waiting in
		// a collective it never joins, end the job at once.
		assert.Contains(t, res.stderr+res.stdout, "left the group (Destroy) after collective #1")
		assert.Less(t, res.elapsed, 20*time.Second, "well before the 60 s timeout")
		assertNothingLeft(t, mark, nil)
	})
	t.Run("stopped", func(t *testing.T) {
		mark := "mpistop" + strings.ReplaceAll(t.Name(), "/", "")
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		res := runAgent(ctx, t, mark, "hang", args)
		assert.Equal(t, 130, res.code, res.stderr)
		assert.Less(t, res.elapsed, 3*time.Second+mpirunStopGrace+2*time.Second)
		assertNothingLeft(t, mark, nil)
	})
}
