package main

import (
	"context"
	"fmt"
	"io"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/examples/internal/cmdline"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// feed is how a replica reads the training set: the seed's split of the
// global batch over a DistributedSampler, or with --deterministic its
// micro-shards of each global batch (ddp.MicroShardSampler).
type feed struct {
	sampler data.Sampler
	// batch is the loader's batch, slots the loader batches a step
	// takes, global the samples a step trains on.
	batch, slots, global int
	stepsPerEpoch        int
	resumeAt             func(epoch, samples int) error
	det                  *ddp.MicroShardSampler
}

func newFeed(out io.Writer, rank0 bool, c config, w ddp.Worker, model *ddp.DistributedDataParallel, n int) (*feed, error) {
	if model.Deterministic() {
		s, err := ddp.NewMicroShardSampler(model, n, c.seed)
		if err != nil {
			return nil, fmt.Errorf("--deterministic: %w", err)
		}
		return &feed{sampler: s, batch: c.det.MicroShard, slots: s.SlotsPerStep(), global: c.batchSize,
			stepsPerEpoch: s.StepsPerEpoch(), resumeAt: s.ResumeAt, det: s}, nil
	}
	perReplica := max(cmdline.PerReplica(out, rank0, c.batchSize, w.WorldSize, fmt.Sprintf("%d replicas", w.WorldSize)), 1)
	s, err := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(w.WorldSize, w.Rank), ddp.SamplerSeed(c.seed))
	if err != nil {
		return nil, err
	}
	steps, err := cmdline.StepsPerEpoch(n, s.Len(), w.WorldSize, perReplica)
	if err != nil {
		return nil, err
	}
	return &feed{sampler: s, batch: perReplica, slots: 1, global: perReplica * w.WorldSize, stepsPerEpoch: steps, resumeAt: s.ResumeAt}, nil
}

func (f *feed) String() string {
	if f.det != nil {
		return fmt.Sprintf("deterministic: global batch %d in micro-shards of %d, %d a step on this replica", f.global, f.batch, f.slots)
	}
	return fmt.Sprintf("batch %d per replica (global %d)", f.batch, f.global)
}

// real drops a step's padding micro-shards: what it trained on.
func (f *feed) real(batches []data.Batch) []data.Batch {
	if f.det == nil {
		return batches
	}
	return f.det.Real(batches)
}

// deterministicStep trains one step of a --deterministic run: the
// replica's micro-shards, their gradients summed in the canonical order
// across the replicas, the update. It returns the global batch's loss.
func deterministicStep(ctx context.Context, split *report.StepSplit, model *ddp.DistributedDataParallel, opt optim.Optimizer,
	batches []data.Batch, step int) (*xla.Tensor, error) {
	opt.ZeroGrad()
	before := hostStatsOf(model.DeterministicStats())
	loss, err := model.BackwardMicroShards(ctx, step, func(s ddp.MicroShard) (*xla.Tensor, error) {
		b := batches[s.Slot]
		return nn.NLLLoss(model.Forward(b.Input).LogSoftmax(1), b.Target, nn.ReductionMean), nil
	})
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
