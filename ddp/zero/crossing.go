package zero

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
)

// crossing is how a ZeroRedundancyOptimizer's gradients and parameters
// cross the replicas of its job, chosen once in New as ddp.Wrap chooses
// its crossing: in-graph over the local replicas when the job is one
// process (inGraph), and through the host process group as well when it
// spans processes (*zeroHost). Every replica calls each method at the
// same point. What ranks agree on (layouts, checkpoint names, flags) goes
// through the job's group itself, a group of one in a job of one process.
type crossing interface {
	// reduceScatter gives each replica its shard of every bucket's mean
	// gradient.
	reduceScatter(ctx context.Context, z *ZeroRedundancyOptimizer) ([]*xla.Tensor, error)
	// allGather assigns every replica's updated shards to the module.
	allGather(ctx context.Context, z *ZeroRedundancyOptimizer) error
	// combineScalar combines a scalar already combined over the local
	// replicas across the processes.
	combineScalar(ctx context.Context, dev *xla.Device, partial *xla.Tensor, op xla.ReduceOp) (*xla.Tensor, error)
	// stats is where the host path's time went (zero in-graph).
	stats() ddp.HostPathStats
}

// inGraph is the crossing of a job of one process: every collective is
// recorded into the step's program.
type inGraph struct{}

func (inGraph) reduceScatter(_ context.Context, z *ZeroRedundancyOptimizer) ([]*xla.Tensor, error) {
	return z.reduceScatterInGraph()
}

func (inGraph) allGather(_ context.Context, z *ZeroRedundancyOptimizer) error {
	return z.allGatherInGraph()
}

func (inGraph) combineScalar(_ context.Context, _ *xla.Device, partial *xla.Tensor, _ xla.ReduceOp) (*xla.Tensor, error) {
	return partial, partial.Err()
}

func (inGraph) stats() ddp.HostPathStats { return ddp.HostPathStats{} }

func (h *zeroHost) reduceScatter(ctx context.Context, z *ZeroRedundancyOptimizer) ([]*xla.Tensor, error) {
	return z.reduceScatterOnHost(ctx, h)
}

func (h *zeroHost) allGather(ctx context.Context, z *ZeroRedundancyOptimizer) error {
	if err := z.allGatherOnHost(ctx, h); err != nil {
		return err
	}
	h.hostStats.Steps++
	return nil
}

func (h *zeroHost) stats() ddp.HostPathStats { return h.hostStats }

// allGatherFlags gives every process each rank's flag, in rank order.
func (z *ZeroRedundancyOptimizer) allGatherFlags(ctx context.Context, mine int32) ([]int32, error) {
	all := make([]int32, z.pg.WorldSize())
	return all, z.pg.AllGather(ctx, dist.Int32s(all), dist.Int32s([]int32{mine}))
}

// checkLayout compares this process's layout with every rank's: the same
// parameters and buckets, and the same local replica count.
func (z *ZeroRedundancyOptimizer) checkLayout(ctx context.Context) (int, error) {
	replicas, err := exchange.CheckLayout(ctx, z.pg, z.layout, z.local, zeroMismatch)
	if err == nil && replicas != z.local*z.pg.WorldSize() {
		err = fmt.Errorf("ranks run different numbers of local replicas (%d in all, %d here × %d ranks): "+
			"ZeroRedundancyOptimizer needs the same count on every rank", replicas, z.local, z.pg.WorldSize())
	}
	return replicas, err
}
