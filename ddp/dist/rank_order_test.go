package dist

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() { scenarios["rank-order"] = rankOrderScenario }

// rankOrderLengths are the buffer lengths rankOrderScenario sums: shorter
// than the world, not dividing it, past a small MPI chunk, and (float32)
// past the tcp backend's direct all-reduce and its 1 MiB pieces.
var rankOrderLengths = []int{1, 3, 7, 2501}

const rankOrderLargeLength = 300_001

// rankOrderScenario: float sums by AllReduce (blocking and async) and
// ReduceScatter equal, bit for bit, the fold of the ranks' values in rank
// order, ((v0 + v1) + v2) + ..., in the buffer's dtype.
func rankOrderScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	world, rank := g.WorldSize(), g.Rank()
	seed := uint64(500)
	for _, d := range []DType{Float32, Float64, BFloat16} {
		lengths := rankOrderLengths
		if d == Float32 {
			lengths = append(lengths, rankOrderLargeLength)
		}
		for _, n := range lengths {
			for _, kind := range []string{"AllReduce", "AllReduceAsync", "ReduceScatter"} {
				seed++
				total := n
				if kind == "ReduceScatter" {
					total = n * world
				}
				_, in := values(d, Sum, total, rank, seed)
				want := rankOrderFold(d, world, total, seed)
				var err error
				got := in
				switch kind {
				case "AllReduce":
					err = g.AllReduce(ctx, in, Sum)
				case "AllReduceAsync":
					err = g.AllReduceAsync(in, Sum).Wait(ctx)
				default:
					_, got = values(d, Sum, n, rank, seed)
					err = g.ReduceScatter(ctx, got, in, Sum)
					want = want.Slice(rank*n, (rank+1)*n)
				}
				if err != nil {
					rep.Error = fmt.Sprintf("%s(%s[%d]): %v", kind, d, n, err)
					return
				}
				if string(got.Bytes()) != string(want.Bytes()) {
					rep.Failures = append(rep.Failures, fmt.Sprintf("%s(%s[%d]) is not the rank-order sum: %v, want %v",
						kind, d, n, asFloat64s(got)[:min(n, 4)], asFloat64s(want)[:min(n, 4)]))
				}
			}
		}
	}
}

// rankOrderFold adds every rank's seeded values in rank order, each
// partial sum rounded to d (bfloat16 added in float32, as one addition).
func rankOrderFold(d DType, world, n int, seed uint64) Buffer {
	_, acc := values(d, Sum, n, 0, seed)
	for r := 1; r < world; r++ {
		_, v := values(d, Sum, n, r, seed)
		switch d {
		case Float32:
			addInto(acc, v, func(a, b float32) float32 { return a + b })
		case Float64:
			addInto(acc, v, func(a, b float64) float64 { return a + b })
		case BFloat16:
			addInto(acc, v, func(a, b bfloat16.BFloat16) bfloat16.BFloat16 {
				return bfloat16.FromFloat32(a.Float32() + b.Float32())
			})
		}
	}
	return acc
}

// addInto sets each element of acc to add(it, v's).
func addInto[T float32 | float64 | bfloat16.BFloat16](acc, v Buffer, add func(a, b T) T) {
	a, _ := Values[T](acc)
	b, _ := Values[T](v)
	for i := range a {
		a[i] = add(a[i], b[i])
	}
}

// TestSumsInRankOrder: the tcp/shm backend sums floats in rank order, in
// shared memory and on the TCP ring, at 2, 3 and 4 ranks: the order the
// in-graph collectives use and the mpi backend can be asked for, so a job
// gives the same bits on every backend.
func TestSumsInRankOrder(t *testing.T) {
	for _, shm := range []string{"XLADDP_SHM_MIB=16", "XLADDP_SHM_MIB=0"} {
		for _, world := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/%d", shm, world), func(t *testing.T) {
				cmds, outs := launch(t, "rank-order", world, "XLADDP_TEST_TIMEOUT=60s", shm)
				for _, rep := range waitReports(t, cmds, outs) {
					require.Empty(t, rep.Error, "rank %d", rep.Rank)
					assert.Empty(t, rep.Failures, "rank %d", rep.Rank)
				}
			})
		}
	}
}
