package main

import (
	"context"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
)

// backwardMicroShards is a --deterministic step's gradients: samples is
// the whole global batch, and this replica computes its micro-shards of
// it (ddp.BackwardMicroShards), which leaves the job's mean gradients,
// summed in the order fixed by the micro-shard count. The step's loss is
// the mean of this replica's micro-shards' losses.
func (t *trainer) backwardMicroShards(ctx context.Context, epoch int, samples []int) error {
	var losses []*xla.Tensor
	err := t.model.BackwardMicroShards(ctx, t.steps, func(s ddp.MicroShard) (*xla.Tensor, error) {
		mine := samples[s.First : s.First+s.Size]
		if !s.Padding {
			if err := t.samples.Add(epoch, mine); err != nil {
				return nil, err
			}
		}
		ids, targets := windowsOf(t.text.train, mine, t.c.model.BlockSize)
		x, y, err := t.upload(ids, targets, s.Size)
		if err != nil {
			return nil, err
		}
		loss := t.lossOf(t.model, x, y)
		if !s.Padding {
			losses = append(losses, loss.Detach())
		}
		return loss, nil
	})
	if err != nil {
		return err
	}
	t.loss = losses[0]
	for _, l := range losses[1:] {
		t.loss = t.loss.Add(l)
	}
	t.loss = t.loss.DivScalar(float64(len(losses)))
	t.steps++
	return nil
}
