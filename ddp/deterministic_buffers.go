package ddp

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// stepBuffers are the module's buffers (BatchNorm's running statistics)
// through a deterministic step. Every micro-shard's forward starts from
// the step's values, so its update depends on its samples alone; the
// floating-point buffers' updates ride in the flat sum after the loss,
// and the step leaves their mean over the micro-shards. For a momentum
// update that is torch's update by the mean of the micro-shards'
// statistics, at any world size. Other buffers keep the update every
// micro-shard makes alike (BatchNorm's batch counter: one a step); one
// that depends on the samples would follow the replica's last
// micro-shard.
type stepBuffers struct {
	named []nn.Named
	start []*xla.Tensor
}

// startBuffers records the buffers' values, materialized.
func (m *DistributedDataParallel) startBuffers(ctx context.Context) (*stepBuffers, error) {
	s := &stepBuffers{named: m.buffers}
	for _, b := range m.buffers {
		v, err := b.Tensor.To(ctx, m.dev)
		if err != nil {
			return nil, fmt.Errorf("ddp: keeping buffer %s through a deterministic step: %w", b.Name, err)
		}
		s.start = append(s.start, v)
	}
	return s, nil
}

// restore gives every buffer the step's starting value back.
func (s *stepBuffers) restore() error {
	for i, b := range s.named {
		if err := b.Tensor.Assign(s.start[i]); err != nil {
			return fmt.Errorf("ddp: restoring buffer %s for the next micro-shard: %w", b.Name, err)
		}
	}
	return nil
}

// updates are the floating-point buffers' values after a micro-shard, in
// float32, flat, in order: what the flat sum carries after the loss.
func (s *stepBuffers) updates() []*xla.Tensor {
	var out []*xla.Tensor
	for _, b := range s.named {
		if b.Tensor.DType().IsFloat() {
			out = append(out, b.Tensor.Cast(xla.Float32).Reshape(b.Tensor.Shape().Size()))
		}
	}
	return out
}

// setMeans gives the floating-point buffers their part of sum from
// offset on, divided by count.
func (s *stepBuffers) setMeans(sum *xla.Tensor, offset int, count float64) error {
	for _, b := range s.named {
		if !b.Tensor.DType().IsFloat() {
			continue
		}
		n := b.Tensor.Shape().Size()
		v := sum.Narrow(0, offset, n).Reshape(b.Tensor.Dims()...).DivScalar(count).Cast(b.Tensor.DType())
		if err := b.Tensor.Assign(v); err != nil {
			return fmt.Errorf("ddp: setting buffer %s to the micro-shards' mean: %w", b.Name, err)
		}
		offset += n
	}
	return nil
}
