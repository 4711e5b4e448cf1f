package zero

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// deterministicStep is Step under a deterministic wrapper: every replica
// holds the job's mean gradients already, summed in the canonical order,
// so none is reduced again. Clipping takes the norm of the whole
// gradients as the plain optimizer does (a norm summed shard by shard
// would round by the world size); each replica then updates its shard of
// the clipped means and the shards are gathered. The update is
// elementwise: the same bits as the plain optimizer's, at any world size.
func (z *ZeroRedundancyOptimizer) deterministicStep(ctx context.Context, clip *clipRequest) error {
	if clip != nil {
		var err error
		if z.lastNorm, err = optim.ClipGradNorm(tensorsOf(z.params), clip.maxNorm, clip.normType); err != nil {
			return fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: clipping: %w", z.replica, err)
		}
	}
	for b, m := range z.masters {
		// This process's block, then the local replica's piece of it:
		// the replicas hold equal values, so their largest is each
		// one's own, exactly, and the program is the same on all.
		n := z.buckets[b].shardLen(z.replicas)
		shard := z.flatGradients(z.buckets[b]).Narrow(0, z.pg.Rank()*z.local*n, z.local*n)
		if z.local > 1 {
			shard = xla.ReduceScatter(shard, xla.ReduceMax, 0)
		}
		if err := m.SetGrad(shard.Cast(m.DType())); err != nil {
			return err
		}
	}
	if err := z.inner.Step(); err != nil {
		return err
	}
	if err := z.cross.allGather(ctx, z); err != nil {
		return fmt.Errorf("zero: ZeroRedundancyOptimizer.Step on replica %d: %w", z.replica, err)
	}
	return nil
}

// tensorsOf is params' tensors, in order.
func tensorsOf(params []nn.Named) []*xla.Tensor {
	out := make([]*xla.Tensor, len(params))
	for i, p := range params {
		out[i] = p.Tensor
	}
	return out
}
