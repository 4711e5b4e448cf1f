package ddp

import (
	"fmt"

	"github.com/gomlx/compute/dtypes"

	"github.com/xladdp/xladdp/xla"
)

// SplitBatch is torch's single-process DataParallel input scatter: given
// one host batch of dims (rows first), shared by every local replica, it
// uploads this replica's equal share of the rows to dev (replica i of R
// takes rows [i·n/R, (i+1)·n/R)). With the model wrapped (Wrap), the
// gradients are then averaged in-graph, so a step equals one step on the
// whole batch.
//
// Prefer it when one loader feeds the job (the batch is read once, on the
// host) and every replica lives in this process; prefer a per-replica
// data.Loader with DistributedSampler when loading is the bottleneck,
// since each replica then reads only its share, in parallel. The rows must
// divide evenly: replicas with different shapes would trace different
// programs.
func SplitBatch[T dtypes.Supported](dev *xla.Device, batch []T, dims ...int) (*xla.Tensor, error) {
	index, count := dev.Replica()
	if len(dims) == 0 {
		return nil, fmt.Errorf("ddp: SplitBatch: the batch needs a leading rows dimension")
	}
	size := 1
	for _, d := range dims {
		if d < 0 {
			return nil, fmt.Errorf("ddp: SplitBatch: negative dimension in %v", dims)
		}
		size *= d
	}
	if size != len(batch) {
		return nil, fmt.Errorf("ddp: SplitBatch: %d values for a batch of %v (%d values)", len(batch), dims, size)
	}
	rows := dims[0]
	if rows == 0 || rows%count != 0 {
		return nil, fmt.Errorf("ddp: SplitBatch: %d rows do not split evenly over %d replicas: use a batch size that is a multiple of %d",
			rows, count, count)
	}
	per := rows / count
	rowSize := size / rows
	part := append([]int{per}, dims[1:]...)
	return xla.FromSlice(dev, batch[index*per*rowSize:(index+1)*per*rowSize], part...)
}
