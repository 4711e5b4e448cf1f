package zero

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp/internal/crossing"
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
		flat := crossing.FlatGradients(z.dev, z.params, &z.buckets[b].Flat)
		shard := crossing.OwnShard(z.dev, z.pg.Rank(), flat, z.buckets[b].ShardLen(z.replicas))
		if err := m.SetGrad(shard.Cast(m.DType())); err != nil {
			return err
		}
	}
	if err := z.inner.Step(); err != nil {
		return err
	}
	return z.keepAndGather(ctx)
}

// tensorsOf is params' tensors, in order.
func tensorsOf(params []nn.Named) []*xla.Tensor {
	out := make([]*xla.Tensor, len(params))
	for i, p := range params {
		out[i] = p.Tensor
	}
	return out
}
