package cmdline

import (
	"context"
	"fmt"
	"io"
	"iter"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/optim"
)

// Feed is how a replica reads the training set: a DistributedSampler's
// share in batches of the normal mode's size, or, under a deterministic
// wrapper, its micro-shards of each global batch (ddp.MicroShardSampler).
type Feed struct {
	Sampler data.Sampler
	// Batch is the loader's batch, Slots the loader batches a step
	// takes, Global the samples a step trains on.
	Batch, Slots, Global int
	StepsPerEpoch        int
	resumeAt             func(epoch, samples int) error
	det                  *ddp.MicroShardSampler
}

// NewFeed is replica w's feed of a dataset of n samples. Under a
// deterministic model it cuts the model's global batch into its
// micro-shards; otherwise (model nil too) each replica reads perReplica
// samples a step of its DistributedSampler share.
func NewFeed(w ddp.Worker, model *ddp.DistributedDataParallel, n, perReplica int, seed uint64) (*Feed, error) {
	if model != nil && model.Deterministic() {
		s, err := ddp.NewMicroShardSampler(model, n, seed)
		if err != nil {
			return nil, fmt.Errorf("--deterministic: %w", err)
		}
		shards, _, _, _ := model.MicroShards()
		return &Feed{Sampler: s, Batch: shards.Size, Slots: s.SlotsPerStep(), Global: shards.GlobalBatch,
			StepsPerEpoch: s.StepsPerEpoch(), resumeAt: s.ResumeAt, det: s}, nil
	}
	s, err := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(w.WorldSize, w.Rank), ddp.SamplerSeed(seed))
	if err != nil {
		return nil, err
	}
	steps, err := StepsPerEpoch(n, s.Len(), w.WorldSize, perReplica)
	if err != nil {
		return nil, err
	}
	return &Feed{Sampler: s, Batch: perReplica, Slots: 1, Global: perReplica * w.WorldSize, StepsPerEpoch: steps,
		resumeAt: s.ResumeAt}, nil
}

// NewGlobalFeed is NewFeed for an example whose --batch-size is the
// global batch in both modes: split evenly over the replicas (rank 0
// noting on out a batch that does not divide; what names the replicas),
// unless model cuts it into micro-shards.
func NewGlobalFeed(out io.Writer, w ddp.Worker, model *ddp.DistributedDataParallel, n, global int, seed uint64, what string) (*Feed, error) {
	perReplica := 0
	if !model.Deterministic() {
		perReplica = max(PerReplica(out, w.Rank == 0, global, w.WorldSize, what), 1)
	}
	return NewFeed(w, model, n, perReplica, seed)
}

// Deterministic reports whether the feed cuts micro-shards.
func (f *Feed) Deterministic() bool { return f.det != nil }

// ResumeAt says that the first samples of epoch's order were used before.
func (f *Feed) ResumeAt(epoch, samples int) error { return f.resumeAt(epoch, samples) }

func (f *Feed) String() string {
	if f.det != nil {
		return fmt.Sprintf("deterministic: global batch %d in micro-shards of %d, %d a step on this replica", f.Global, f.Batch, f.Slots)
	}
	return fmt.Sprintf("batch %d per replica (global %d)", f.Batch, f.Global)
}

// Real drops a step's padding micro-shards: what it trained on.
func (f *Feed) Real(batches []data.Batch) []data.Batch {
	if f.det == nil {
		return batches
	}
	return f.det.Real(batches)
}

// Step is one training step's loader batches (one, or a deterministic
// step's micro-shards) and its index among the steps the epoch's loader
// yields.
type Step struct {
	Batches []data.Batch
	Index   int
}

// Steps groups an epoch's loader batches into steps. The batches slice
// is reused: a step's is valid until the next.
func (f *Feed) Steps(batches iter.Seq2[data.Batch, error]) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		var pending []data.Batch
		for b, err := range batches {
			if err != nil {
				yield(Step{}, err)
				return
			}
			if pending = append(pending, b); len(pending) < f.Slots {
				continue
			}
			if !yield(Step{Batches: pending, Index: b.Index / f.Slots}, nil) {
				return
			}
			pending = pending[:0]
		}
	}
}

// TrainStep trains one step on a step's batches and returns its loss:
// the normal mode's backward pass, average and update (optim.BackwardStep)
// on its batch, or a deterministic step over the replica's micro-shards
// (their gradients summed in the canonical order; the loss is the global
// batch's) and the update. lossOf is a batch's loss; model may be nil
// outside DDP in the normal mode; step counts the steps trained before.
func (f *Feed) TrainStep(ctx context.Context, model *ddp.DistributedDataParallel, opt optim.Optimizer, batches []data.Batch, step int,
	lossOf func(data.Batch) *xla.Tensor) (*xla.Tensor, error) {
	opt.ZeroGrad()
	if f.det == nil {
		loss := lossOf(batches[0])
		return loss, optim.BackwardStep(ctx, loss, opt)
	}
	loss, err := BackwardMicroShards(ctx, model, step, batches, lossOf)
	if err != nil {
		return nil, err
	}
	return loss, opt.Step()
}

// BackwardMicroShards is model.BackwardMicroShards over a step's
// micro-shards, lossOf giving one micro-shard batch's loss: every
// parameter's gradient the mean over the global batch, summed in the
// canonical order. It returns the global batch's loss.
func BackwardMicroShards(ctx context.Context, model *ddp.DistributedDataParallel, step int, batches []data.Batch,
	lossOf func(data.Batch) *xla.Tensor) (*xla.Tensor, error) {
	return model.BackwardMicroShards(ctx, step, func(s ddp.MicroShard) (*xla.Tensor, error) {
		return lossOf(batches[s.Slot]), nil
	})
}
