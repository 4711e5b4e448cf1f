package training

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/optim"
)

// Feed is how a replica reads the training set and trains a step in the
// job's mode: a DistributedSampler's share of each global batch, or in
// deterministic mode its micro-shards of it (MicroShardSampler). A loader
// over Sampler with a batch size of Batch (DropLast) yields what Steps
// groups into steps, and TrainStep trains one.
type Feed struct {
	Sampler data.Sampler
	// Batch is the loader's batch, Slots the loader batches a step
	// takes, Global the samples a step trains on.
	Batch, Slots, Global int
	StepsPerEpoch        int
	// Note says how the global batch was rounded to divide over the
	// replicas, or which samples the deterministic mode's whole global
	// batches leave out ("" for neither): for the program to print.
	Note     string
	resumeAt func(epoch, samples int) error
	// model is the wrapper whose mode the feed follows; stats its
	// host-side times so far (zero where nothing crosses on the host).
	model *ddp.DistributedDataParallel
	stats func(optim.Optimizer) ddp.HostPathStats
	det   *ddp.MicroShardSampler
	last  StepTimes
	// trained is the steps done once the last TrainStep that succeeded
	// returned: its update is applied (or traced) from then on.
	trained int
}

// NewFeed is replica w's feed of a dataset of n samples for model, made
// by Worker.Wrap (or with Deterministic): the model's global batch split
// evenly over the replicas, or cut into its micro-shards.
func NewFeed(w ddp.Worker, model *ddp.DistributedDataParallel, n int) (*Feed, error) {
	if model == nil {
		return nil, errors.New("training: NewFeed of a nil model")
	}
	b := model.Batch()
	if b.Global < 1 {
		return nil, errors.New("training: NewFeed: the model has no global batch: wrap it with Worker.Wrap (or ddp.Deterministic)")
	}
	if shards, _, _, ok := model.MicroShards(); ok {
		s, err := ddp.NewMicroShardSampler(model, n, b.Seed)
		if err != nil {
			return nil, fmt.Errorf("--deterministic: %w", err)
		}
		f := &Feed{Sampler: s, Batch: shards.Size, Slots: s.SlotsPerStep(), Global: shards.GlobalBatch,
			StepsPerEpoch: s.StepsPerEpoch(), resumeAt: s.ResumeAt, model: model, stats: deterministicStats(model), det: s}
		if left := n - f.StepsPerEpoch*f.Global; left > 0 {
			f.Note = fmt.Sprintf("--deterministic trains on whole global batches of %d: each epoch leaves out %d of the %d "+
				"samples (its order's last, as torch's drop_last); a global batch dividing %d uses them all", f.Global, left, n, n)
		}
		return f, nil
	}
	f, err := shareOf(w, n, b)
	if err != nil {
		return nil, err
	}
	f.model, f.stats = model, hostPathStats(model)
	return f, nil
}

// NewLocalFeed is the feed of a program that trains one device with no
// wrapper (a tutorial's baseline): the plain mode's, for a job of one
// replica.
func NewLocalFeed(n int, b ddp.Batch) (*Feed, error) {
	f, err := shareOf(ddp.Worker{WorldSize: 1}, n, b)
	if err != nil {
		return nil, err
	}
	f.stats = func(optim.Optimizer) ddp.HostPathStats { return ddp.HostPathStats{} }
	return f, nil
}

// shareOf is the plain mode's feed: replica w's DistributedSampler share
// of a dataset of n samples, in batches of its share of b.Global.
func shareOf(w ddp.Worker, n int, b ddp.Batch) (*Feed, error) {
	if b.Global < 1 {
		return nil, fmt.Errorf("training: a global batch of %d: give at least 1 sample", b.Global)
	}
	perReplica := max(b.Global/w.WorldSize, 1)
	f := &Feed{Batch: perReplica, Slots: 1, Global: perReplica * w.WorldSize}
	if f.Global != b.Global {
		f.Note = fmt.Sprintf("the global batch %d does not divide over %d replicas: each takes %d, a global batch of %d",
			b.Global, w.WorldSize, perReplica, f.Global)
	}
	s, err := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(w.WorldSize, w.Rank), ddp.SamplerSeed(b.Seed))
	if err != nil {
		return nil, err
	}
	if f.StepsPerEpoch = s.Len() / perReplica; f.StepsPerEpoch == 0 {
		return nil, fmt.Errorf("training: each of the %d replicas reads %d of the %d training samples, less than one batch of %d: "+
			"no step would run; lower the batch size", w.WorldSize, s.Len(), n, perReplica)
	}
	f.Sampler, f.resumeAt = s, s.ResumeAt
	return f, nil
}

// GlobalBatch is a step's samples over the job: the feed as a Loop's
// Order.
func (f *Feed) GlobalBatch() int { return f.Global }

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

// StepTimes is where TrainStep's last step spent its time beside tracing:
// the programs it ran, and on the host path (or the deterministic sums)
// the copies and the exchange across replicas.
type StepTimes struct {
	Execute, Download, Exchange, Upload time.Duration
}

// Trained is the steps done once the last TrainStep that succeeded
// returned (its step + 1; 0 before any): a Loop ended before it
// committed that step (End) knows its update is applied.
func (f *Feed) Trained() int { return f.trained }

// LastStep is the times of the last TrainStep.
func (f *Feed) LastStep() StepTimes { return f.last }

// TrainStep trains one step on st's batches and returns its loss:
// gradients cleared, the backward pass averaged over the replicas (or in
// deterministic mode the replica's micro-shards, summed in the canonical
// order), the optimizer's update. When it returns, the step has run on
// every replica (the host path traces the update into the next step's
// program instead), so reading the loss on one replica costs no program.
// lossOf is a loader batch's loss; step counts the steps trained before
// (a resumed run's included).
func (f *Feed) TrainStep(ctx context.Context, opt optim.Optimizer, st Step, step int, lossOf func(data.Batch) *xla.Tensor) (*xla.Tensor, error) {
	before := f.stats(opt)
	opt.ZeroGrad()
	var loss *xla.Tensor
	var err error
	if f.det == nil {
		loss = lossOf(st.Batches[0])
		err = loss.Backward()
	} else {
		loss, err = f.model.BackwardMicroShards(ctx, step, func(s ddp.MicroShard) (*xla.Tensor, error) {
			return lossOf(st.Batches[s.Slot]), nil
		})
	}
	if err != nil {
		loss, err = crossingFailed(func() *xla.Tensor { return lossOf(st.Batches[0]) }, err)
	}
	if err == nil {
		err = opt.Step()
	}
	if err != nil {
		return nil, err
	}
	f.trained = step + 1
	after := f.stats(opt)
	f.last = StepTimes{Execute: after.Execute - before.Execute, Download: after.Download - before.Download,
		Exchange: after.AllReduce - before.AllReduce, Upload: after.Upload - before.Upload}
	if f.det == nil && after.Steps > before.Steps {
		return loss, nil // the host path ran the step's program; the update rides in the next
	}
	start := time.Now()
	err = loss.Device().MarkStep(ctx)
	f.last.Execute += time.Since(start)
	return loss, err
}

// deterministicStats is a deterministic wrapper's times in the host
// path's terms: the exchange is its all-reduce.
func deterministicStats(model *ddp.DistributedDataParallel) func(optim.Optimizer) ddp.HostPathStats {
	return func(optim.Optimizer) ddp.HostPathStats {
		s := model.DeterministicStats()
		return ddp.HostPathStats{Steps: s.Steps, Execute: s.Execute, Download: s.Download, AllReduce: s.Exchange, Upload: s.Upload}
	}
}

// hostPathStats is the wrapper's host path times, or a sharded
// optimizer's, which crosses replicas itself.
func hostPathStats(model *ddp.DistributedDataParallel) func(optim.Optimizer) ddp.HostPathStats {
	return func(opt optim.Optimizer) ddp.HostPathStats {
		if o, ok := opt.(interface{ HostPathStats() ddp.HostPathStats }); ok {
			return o.HostPathStats()
		}
		return model.HostPathStats()
	}
}
