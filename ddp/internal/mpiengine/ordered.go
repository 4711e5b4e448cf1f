//go:build mpi

package mpiengine

import (
	"fmt"
	"os"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/reduce"

	"github.com/xladdp/xladdp/internal/knobs"
)

// EnvMPIReduceOrder is how the mpi backend orders the terms of a
// floating-point sum (or mean) in AllReduce and ReduceScatter: "mpi", the
// default, leaves it to MPI's algorithms, which choose per collective,
// rank count and size (Open MPI's all-reduce and reduce-scatter at 4
// ranks add in different orders, so the same gradients summed by each
// can differ in the last bit); "rank" adds the ranks' values in rank
// order, as the tcp/shm backend and the in-graph collectives do, so that
// every backend, and a reduce-scatter beside an all-reduce, gives the
// same bits. It moves what a ring all-reduce moves (MPI_Alltoallv of the
// parts, then MPI_Allgather of the sums), with more messages than MPI's
// latency-optimal algorithms for small buffers.
const EnvMPIReduceOrder = "XLADDP_MPI_REDUCE_ORDER"

// parseReduceOrder reads EnvMPIReduceOrder: whether sums go in rank order.
func parseReduceOrder() (bool, error) {
	on, err := knobs.MPIReduceOrder(os.Getenv(EnvMPIReduceOrder))
	if err != nil {
		return false, fmt.Errorf("ddp: %w", err)
	}
	return on, nil
}

// inRankOrder reports whether c is a sum this engine adds in rank order.
func (e *mpiEngine) inRankOrder(c transport.Call, dtype transport.DType) bool {
	floating := dtype == transport.Float32 || dtype == transport.Float64 || dtype == transport.BFloat16
	return e.rankOrder && floating && (c.Op == reduce.Sum || c.Op == reduce.Avg)
}

// allReduceInRankOrder sums buf over the ranks in rank order: each rank
// gathers every rank's values of its own part (MPI_Alltoallv), adds them
// rank by rank, and the parts' sums are gathered by every rank
// (MPI_Allgather). Parts are ⌈n/size⌉ long, the last zero-padded.
func (e *mpiEngine) allReduceInRankOrder(buf transport.Buffer) error {
	n, elem := buf.Len(), buf.DType.Size()
	if n == 0 {
		return nil // every rank's is empty: nothing to exchange
	}
	// Pieces small enough that size parts of them, padded, keep MPI's
	// int counts and displacements.
	piece := max(1, (mpiChunkElements/e.size-1)*e.size)
	if n > piece {
		for lo := 0; lo < n; lo += piece {
			if err := e.allReduceInRankOrder(buf.Slice(lo, min(lo+piece, n))); err != nil {
				return err
			}
		}
		return nil
	}
	part := (n + e.size - 1) / e.size
	padded := make([]byte, part*e.size*elem)
	copy(padded, buf.Bytes())
	sum, err := e.sumOwnPart(padded, buf.DType, part)
	if err != nil {
		return err
	}
	if err := e.comm.Allgather(padded, sum, mpiDatatypes[buf.DType]); err != nil {
		return err
	}
	copy(buf.Bytes(), padded)
	return nil
}

// reduceScatterInRankOrder gives out this rank's part of in (size equal
// parts) summed over the ranks in rank order.
func (e *mpiEngine) reduceScatterInRankOrder(out, in transport.Buffer) error {
	if out.Len() == 0 {
		return nil
	}
	sum, err := e.sumOwnPart(in.Bytes(), in.DType, out.Len())
	if err != nil {
		return err
	}
	copy(out.Bytes(), sum)
	return nil
}

// sumOwnPart sends part i of all (size parts of part elements) to rank i
// and returns the sum, in rank order, of every rank's part this rank
// owns.
func (e *mpiEngine) sumOwnPart(all []byte, dtype transport.DType, part int) ([]byte, error) {
	counts := make([]int, e.size)
	for i := range counts {
		counts[i] = part
	}
	received := make([]byte, len(all))
	if err := e.comm.Alltoallv(received, all, mpiDatatypes[dtype], counts, counts); err != nil {
		return nil, err
	}
	bytes := part * dtype.Size()
	sum := transport.LeasedBuffer(dtype, received[:bytes], nil)
	for r := 1; r < e.size; r++ {
		transport.ReduceInto(sum, transport.LeasedBuffer(dtype, received[r*bytes:(r+1)*bytes], nil), reduce.Sum)
	}
	return sum.Bytes(), nil
}
