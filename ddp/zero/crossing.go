package zero

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/crossing"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
)

// HostPathStats is where Step's host path spent its time on this replica
// (Download and Upload the copies, AllReduce the reduce-scatter and
// all-gather waits); zero when the job is one process. The optimizer
// crosses replicas through its wrapper's crossing, so these are the
// wrapper's HostPathStats.
func (z *ZeroRedundancyOptimizer) HostPathStats() ddp.HostPathStats {
	if h, ok := z.cross.(*crossing.HostPath); ok {
		return h.Stats()
	}
	return ddp.HostPathStats{}
}

// flats is the buckets' runs, as the crossing takes them.
func (z *ZeroRedundancyOptimizer) flats() []*crossing.Flat {
	out := make([]*crossing.Flat, len(z.buckets))
	for i, b := range z.buckets {
		out[i] = &b.Flat
	}
	return out
}

// gather assigns every replica's updated shards to the module.
func (z *ZeroRedundancyOptimizer) gather(ctx context.Context) error {
	shards := make([]*xla.Tensor, len(z.masters))
	for i, m := range z.masters {
		shards[i] = m.Detach()
	}
	return z.cross.AllGather(ctx, z.dev, z.params, z.flats(), shards)
}

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
