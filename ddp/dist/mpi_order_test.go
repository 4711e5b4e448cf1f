//go:build mpi

package dist

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/mpiengine"
)

func init() {
	scenarios["mpi-rank-order-chunked"] = func(ctx context.Context, g *ProcessGroup, rep *report) {
		empty := Float32s(nil)
		for i, err := range []error{g.AllReduce(ctx, empty, Sum), g.AllReduceAsync(empty, Avg).Wait(ctx), g.ReduceScatter(ctx, empty, empty, Sum)} {
			if err != nil {
				rep.Failures = append(rep.Failures, fmt.Sprintf("empty sum %d: %v", i, err))
			}
		}
		mpiengine.SetChunkElements(1000)
		rankOrderScenario(ctx, g, rep)
	}
}

// TestMPISumsInRankOrder: with XLADDP_MPI_REDUCE_ORDER=rank the mpi
// backend's float all-reduces and reduce-scatters equal the rank-order
// fold bit for bit (as the tcp/shm backend's do, TestSumsInRankOrder), at
// 2, 3 and 4 ranks, empty and past a small MPI chunk; every collective of the
// suite still passes in that mode; a bad value is refused on every rank.
func TestMPISumsInRankOrder(t *testing.T) {
	order := EnvMPIReduceOrder + "=rank"
	for _, tc := range []struct {
		scenario string
		np       int
	}{{"rank-order", 2}, {"rank-order", 3}, {"rank-order", 4}, {"mpi-rank-order-chunked", 3}, {"collectives", 4}} {
		t.Run(fmt.Sprintf("%s/%d", tc.scenario, tc.np), func(t *testing.T) {
			res := mpirunJob(t, tc.scenario, tc.np, nil, "XLADDP_TEST_TIMEOUT=60s", order)
			requireClean(t, res)
			for r, rep := range res.Reps {
				assert.Equal(t, TransportMPI, rep.Transport, "rank %d", r)
				assert.Equal(t, res.Reps[0].Hashes, rep.Hashes, "rank %d's results differ from rank 0's", r)
			}
		})
	}
	t.Run("bad value", func(t *testing.T) {
		res := mpirunJob(t, "basic", 2, nil, "XLADDP_TEST_TIMEOUT=60s", EnvMPIReduceOrder+"=sideways")
		require.Len(t, res.Reps, 2)
		for r, rep := range res.Reps {
			assert.Contains(t, rep.Error, `$XLADDP_MPI_REDUCE_ORDER is "sideways": use mpi`, "rank %d", r)
		}
	})
}
