package main

import (
	"context"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// lossOf is the seed's loss of a batch.
func lossOf(model nn.Module, b data.Batch) *xla.Tensor {
	return nn.NLLLoss(model.Forward(b.Input).LogSoftmax(1), b.Target, nn.ReductionMean)
}

// deterministicStep trains one step of a --deterministic run: the
// replica's micro-shards, their gradients summed in the canonical order
// across the replicas, the update. It returns the global batch's loss.
func deterministicStep(ctx context.Context, split *report.StepSplit, model *ddp.DistributedDataParallel, opt optim.Optimizer,
	batches []data.Batch, step int) (*xla.Tensor, error) {
	opt.ZeroGrad()
	before := hostStatsOf(model.DeterministicStats())
	loss, err := cmdline.BackwardMicroShards(ctx, model, step, batches, func(b data.Batch) *xla.Tensor { return lossOf(model, b) })
	if err != nil {
		return nil, err
	}
	if err := opt.Step(); err != nil {
		return nil, err
	}
	return loss, finishStep(ctx, split, before, hostStatsOf(model.DeterministicStats()), loss.Device())
}

// hostStatsOf is a deterministic step's times in the host path's terms:
// the exchange is its all-reduce.
func hostStatsOf(s ddp.DeterministicStats) ddp.HostPathStats {
	return ddp.HostPathStats{Steps: s.Steps, Execute: s.Execute, Download: s.Download, AllReduce: s.Exchange, Upload: s.Upload}
}
