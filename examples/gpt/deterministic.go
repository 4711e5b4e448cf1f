package main

import (
	"context"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
)

// backwardMicroShards is a --deterministic step's gradients: samples is
// the whole global batch, and this replica computes its micro-shards of
// it (ddp.BackwardMicroShards), which leaves the job's mean gradients,
// summed in the order fixed by the micro-shard count, and the global
// batch's loss.
func (t *trainer) backwardMicroShards(ctx context.Context, epoch int, samples []int) error {
	var err error
	t.loss, err = t.model.BackwardMicroShards(ctx, t.steps, func(s ddp.MicroShard) (*xla.Tensor, error) {
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
		return t.lossOf(t.model, x, y), nil
	})
	if err != nil {
		return err
	}
	t.steps++
	return nil
}
