package zero

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
)

// crossing is how a ZeroRedundancyOptimizer's values cross the replicas
// of its job, chosen once in New as ddp.Wrap chooses its
// ReplicaCollectives: in-graph over the local replicas when the job is
// one process (inGraph), and through the host process group as well when
// it spans processes (*zeroHost). Every replica calls each method at the
// same point; the rank-level ones (rank, broadcastWords, allGatherBytes,
// allGatherFlags, checkLayout) run on local replica 0 only.
type crossing interface {
	// reduceScatter gives each replica its shard of every bucket's mean
	// gradient.
	reduceScatter(ctx context.Context, z *ZeroRedundancyOptimizer) ([]*xla.Tensor, error)
	// allGather assigns every replica's updated shards to the module.
	allGather(ctx context.Context, z *ZeroRedundancyOptimizer) error
	// combineScalar combines a scalar already combined over the local
	// replicas across the processes.
	combineScalar(ctx context.Context, dev *xla.Device, partial *xla.Tensor, op xla.ReduceOp) (*xla.Tensor, error)
	// group is the process group the agreements of exchange run over
	// (exchange's own reading of a one-process job when there is none).
	group() *dist.ProcessGroup
	// rank and processes place this process in the job.
	rank() int
	processes() int
	// broadcastWords gives every process rank 0's words.
	broadcastWords(ctx context.Context, words []int64) error
	// allGatherBytes gives every process each rank's bytes, in rank order.
	allGatherBytes(ctx context.Context, mine []byte) ([][]byte, error)
	// allGatherFlags gives every process each rank's flag, in rank order.
	allGatherFlags(ctx context.Context, mine int32) ([]int32, error)
	// checkLayout compares this process's layout with every rank's and
	// returns the job's replica count.
	checkLayout(ctx context.Context, layout string, local int) (int, error)
	// stats is where the host path's time went (zero in-graph).
	stats() ddp.HostPathStats
}

// inGraph is the crossing of a job of one process: every collective is
// recorded into the step's program, and a rank-level exchange is with
// this process alone.
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

func (inGraph) group() *dist.ProcessGroup                                       { return dist.Current() }
func (inGraph) rank() int                                                       { return 0 }
func (inGraph) processes() int                                                  { return 1 }
func (inGraph) broadcastWords(context.Context, []int64) error                   { return nil }
func (inGraph) allGatherBytes(_ context.Context, b []byte) ([][]byte, error)    { return [][]byte{b}, nil }
func (inGraph) allGatherFlags(_ context.Context, f int32) ([]int32, error)      { return []int32{f}, nil }
func (inGraph) checkLayout(_ context.Context, _ string, local int) (int, error) { return local, nil }
func (inGraph) stats() ddp.HostPathStats                                        { return ddp.HostPathStats{} }

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

func (h *zeroHost) group() *dist.ProcessGroup { return h.pg }
func (h *zeroHost) rank() int                 { return h.pg.Rank() }
func (h *zeroHost) processes() int            { return h.pg.WorldSize() }
func (h *zeroHost) stats() ddp.HostPathStats  { return h.hostStats }

func (h *zeroHost) broadcastWords(ctx context.Context, words []int64) error {
	return h.pg.Broadcast(ctx, dist.Int64s(words), 0)
}

func (h *zeroHost) allGatherBytes(ctx context.Context, mine []byte) ([][]byte, error) {
	return exchange.AllGatherBytes(ctx, h.pg, mine)
}

func (h *zeroHost) allGatherFlags(ctx context.Context, mine int32) ([]int32, error) {
	all := make([]int32, h.pg.WorldSize())
	return all, h.pg.AllGather(ctx, dist.Int32s(all), dist.Int32s([]int32{mine}))
}

func (h *zeroHost) checkLayout(ctx context.Context, layout string, local int) (int, error) {
	replicas, err := exchange.CheckLayout(ctx, h.pg, layout, local, zeroMismatch)
	if err == nil && replicas != local*h.pg.WorldSize() {
		err = fmt.Errorf("ranks run different numbers of local replicas (%d in all, %d here × %d ranks): "+
			"ZeroRedundancyOptimizer needs the same count on every rank", replicas, local, h.pg.WorldSize())
	}
	return replicas, err
}
