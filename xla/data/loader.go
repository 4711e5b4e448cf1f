package data

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/xladdp/xladdp/xla"
)

// LoaderConfig configures a Loader like torch's DataLoader.
type LoaderConfig struct {
	BatchSize int
	// Shuffle uses a RandomSampler with Seed; ignored when Sampler is set.
	Shuffle bool
	Seed    uint64
	// DropLast drops a final partial batch (whose new shape would compile
	// a second program).
	DropLast bool
	Sampler  Sampler
	// Workers assemble batches in parallel (default 2).
	Workers int
	// Prefetch is how many batches may wait on the device ahead of use
	// (default 2).
	Prefetch int
}

// Batch is one batch on the device.
type Batch struct {
	Input  *xla.Tensor // [Size, InputDims...] Float32
	Target *xla.Tensor // [Size, TargetDims...] of the dataset's TargetDType
	Size   int
	// Index counts batches within the epoch.
	Index int
	// Samples are the dataset indices of the batch's samples, in order.
	Samples []int
}

// Stats measure how much the training loop waited for input.
type Stats struct {
	Batches int
	// Wait is the time the consumer spent blocked on the next batch;
	// Elapsed is the wall time from the epoch's start to its last batch;
	// Assemble is the workers' time reading, batching and uploading the
	// batches handed over (beside the consumer's work when Wait is small).
	Wait, Elapsed, Assemble time.Duration
}

// Loader batches a Dataset onto a device.
type Loader struct {
	ds     Dataset
	dev    *xla.Device
	cfg    LoaderConfig
	mu     sync.Mutex
	stats  Stats
	inSize int
	tgSize int
}

// NewLoader checks cfg and returns a loader for ds on dev.
func NewLoader(ds Dataset, dev *xla.Device, cfg LoaderConfig) (*Loader, error) {
	if cfg.BatchSize < 1 {
		return nil, fmt.Errorf("data: batch size %d: must be >= 1", cfg.BatchSize)
	}
	if ds.Len() == 0 {
		return nil, fmt.Errorf("data: the dataset is empty")
	}
	if td := ds.TargetDType(); td != xla.Int32 && td != xla.Float32 {
		return nil, fmt.Errorf("data: target dtype %s: want Int32 or Float32", td)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2
	}
	if cfg.Workers < 0 || cfg.Prefetch < 0 {
		return nil, fmt.Errorf("data: workers %d and prefetch %d must be positive", cfg.Workers, cfg.Prefetch)
	}
	if cfg.Sampler == nil {
		if cfg.Shuffle {
			cfg.Sampler = RandomSampler{N: ds.Len(), Seed: cfg.Seed}
		} else {
			cfg.Sampler = SequentialSampler{N: ds.Len()}
		}
	}
	return &Loader{ds: ds, dev: dev, cfg: cfg, inSize: product(ds.InputDims()), tgSize: product(ds.TargetDims())}, nil
}

func product(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// batches splits an epoch's indices into batches.
func (l *Loader) batches(epoch int) [][]int {
	idx := l.cfg.Sampler.Indices(epoch)
	var out [][]int
	for start := 0; start < len(idx); start += l.cfg.BatchSize {
		end := min(start+l.cfg.BatchSize, len(idx))
		if end-start < l.cfg.BatchSize && l.cfg.DropLast {
			break
		}
		out = append(out, idx[start:end])
	}
	return out
}

// NumBatches returns how many batches an epoch yields.
func (l *Loader) NumBatches(epoch int) int { return len(l.batches(epoch)) }

// Stats returns the last epoch's input-wait measurements.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

type batchResult struct {
	batch Batch
	err   error
	took  time.Duration
}

// Epoch yields the epoch's batches in order. Workers assemble and upload
// up to Prefetch batches ahead; stopping the loop early (break) or ctx
// ending stops them. An error is yielded once and ends the epoch.
func (l *Loader) Epoch(ctx context.Context, epoch int) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		if ea, ok := l.ds.(EpochAware); ok {
			ea.SetEpoch(epoch)
		}
		ctx, cancel := context.WithCancel(ctx)
		// Every goroutine of the epoch ends before Epoch returns (after a
		// break or a cancelled ctx too), so closing the engine afterwards
		// never races an upload.
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		plan := l.batches(epoch)
		pending := make(chan chan batchResult, l.cfg.Prefetch)
		workers := make(chan struct{}, l.cfg.Workers)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(pending)
			l.produce(ctx, &wg, plan, pending, workers)
		}()
		l.deliver(ctx, epoch, len(plan), pending, yield)
	}
}

// produce starts assembling the plan's batches in order, one worker a
// batch holding a slot of workers, and queues each one's result channel
// on pending, until ctx ends; wg counts the workers.
func (l *Loader) produce(ctx context.Context, wg *sync.WaitGroup, plan [][]int, pending chan<- chan batchResult, workers chan struct{}) {
	for i, indices := range plan {
		out := make(chan batchResult, 1)
		select {
		case pending <- out:
		case <-ctx.Done():
			return
		}
		select {
		case workers <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-workers }()
			if err := ctx.Err(); err != nil {
				out <- batchResult{err: err}
				return
			}
			start := time.Now()
			b, err := l.assemble(i, indices)
			out <- batchResult{b, err, time.Since(start)}
		}()
	}
}

// deliver yields the batches in order as their results come in on
// pending, until one fails, the loop stops, or ctx ends before all
// batches (of planned) came; then it records the epoch's stats.
func (l *Loader) deliver(ctx context.Context, epoch, planned int, pending <-chan chan batchResult, yield func(Batch, error) bool) {
	start := time.Now()
	var stats Stats
	defer func() {
		stats.Elapsed = time.Since(start)
		l.mu.Lock()
		l.stats = stats
		l.mu.Unlock()
	}()
	for out := range pending {
		waitStart := time.Now()
		var r batchResult
		select {
		case r = <-out:
		case <-ctx.Done():
			yield(Batch{}, fmt.Errorf("data: waiting for batch: %w", ctx.Err()))
			return
		}
		stats.Wait += time.Since(waitStart)
		if r.err != nil {
			yield(Batch{}, r.err)
			return
		}
		stats.Batches++
		stats.Assemble += r.took
		if !yield(r.batch, nil) {
			return
		}
	}
	if err := ctx.Err(); err != nil && stats.Batches < planned {
		yield(Batch{}, fmt.Errorf("data: epoch %d stopped after %d of %d batches: %w", epoch, stats.Batches, planned, err))
	}
}

// assemble reads the samples of one batch and uploads them.
func (l *Loader) assemble(index int, indices []int) (Batch, error) {
	n := len(indices)
	inputs := make([]float32, n*l.inSize)
	targets := make([]float32, n*l.tgSize)
	for k, i := range indices {
		s, err := l.ds.Get(i)
		if err != nil {
			return Batch{}, fmt.Errorf("data: sample %d: %w", i, err)
		}
		if len(s.Input) != l.inSize || len(s.Target) != l.tgSize {
			return Batch{}, fmt.Errorf("data: sample %d has %d input and %d target values, want %d and %d",
				i, len(s.Input), len(s.Target), l.inSize, l.tgSize)
		}
		copy(inputs[k*l.inSize:], s.Input)
		copy(targets[k*l.tgSize:], s.Target)
	}
	in, err := xla.FromSlice(l.dev, inputs, append([]int{n}, l.ds.InputDims()...)...)
	if err != nil {
		return Batch{}, err
	}
	tdims := append([]int{n}, l.ds.TargetDims()...)
	var tg *xla.Tensor
	if l.ds.TargetDType() == xla.Int32 {
		labels := make([]int32, len(targets))
		for i, v := range targets {
			labels[i] = int32(v)
		}
		tg, err = xla.FromSlice(l.dev, labels, tdims...)
	} else {
		tg, err = xla.FromSlice(l.dev, slices.Clone(targets), tdims...)
	}
	if err != nil {
		return Batch{}, err
	}
	return Batch{Input: in, Target: tg, Size: n, Index: index, Samples: indices}, nil
}
