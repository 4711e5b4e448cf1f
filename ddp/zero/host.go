package zero

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
)

// zeroHost is a ZeroRedundancyOptimizer's host path across processes.
// Local replica 0 alone talks to the other processes; each bucket has a
// padded host buffer (gradients going out, gathered parameters coming
// back) and this process's block of it (the reduced gradients of its
// local replicas' shards), reused from step to step.
type zeroHost struct {
	pg        *dist.ProcessGroup
	buckets   []zeroHostBucket
	hostStats ddp.HostPathStats
}

// errCompiledAcrossProcesses: a compiled step cannot hold the host cut.
var errCompiledAcrossProcesses = errors.New("zero: the job spans processes, so Step reduce-scatters the gradients " +
	"and gathers the parameters on the host, between programs, and a compiled step is one program: " +
	"compile the forward and backward, and call Step between Runs")

// HostPathStats is where Step's host path spent its time on this replica
// (Download and Upload the copies, AllReduce the reduce-scatter and
// all-gather waits); zero when the job is one process.
func (z *ZeroRedundancyOptimizer) HostPathStats() ddp.HostPathStats { return z.cross.stats() }

type zeroHostBucket struct {
	full, block dist.Buffer
}

// buffers allocates the host buffers on first use.
func (h *zeroHost) buffers(buckets []*zeroBucket) error {
	if h.buckets != nil {
		return nil
	}
	out := make([]zeroHostBucket, len(buckets))
	for i, b := range buckets {
		dtype, ok := exchange.HostDType(b.dtype)
		if !ok {
			return fmt.Errorf("bucket %d holds %s parameters; the host path carries float32, float64 and bfloat16", i, b.dtype)
		}
		size := b.dtype.Size()
		blockLen := b.padded / h.pg.WorldSize()
		out[i] = zeroHostBucket{
			full:  dist.ByteBuffer(dtype, make([]byte, b.padded*size)),
			block: dist.ByteBuffer(dtype, make([]byte, blockLen*size)),
		}
	}
	h.buckets = out
	return nil
}

// reduceScatterOnHost divides the gradients by the job's replica count
// and sums them over the local replicas in-graph, as the plain wrapper
// does, runs the step's program, and reduce-scatters the sums across the
// processes; each local replica uploads its shard of the means.
func (z *ZeroRedundancyOptimizer) reduceScatterOnHost(ctx context.Context, h *zeroHost) ([]*xla.Tensor, error) {
	if z.dev.Tracing() {
		return nil, errCompiledAcrossProcesses
	}
	if err := exchange.DivideAndSumLocally(z.params, z.replicas, z.local); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := z.dev.MarkStep(ctx); err != nil {
		return nil, err
	}
	h.hostStats.Execute += time.Since(start)
	shared, err := exchange.HostOnce(ctx, z.dev, h.pg.Timeout(), "the gradient reduce-scatter", func() ([]zeroHostBucket, error) {
		err := z.hostReduceScatter(ctx, h)
		return h.buckets, err
	})
	if err != nil {
		return nil, err
	}
	start = time.Now()
	defer func() { h.hostStats.Upload += time.Since(start) }()
	index, _ := z.dev.Replica()
	out := make([]*xla.Tensor, len(z.buckets))
	for i, b := range z.buckets {
		n := b.shardLen(z.replicas)
		part := shared[i].block.Slice(index*n, (index+1)*n)
		if out[i], err = xla.FromBytes(z.dev, b.dtype, []int{n}, part.Bytes()); err != nil {
			return nil, fmt.Errorf("uploading the gradient shard of bucket %d: %w", i, err)
		}
	}
	return out, nil
}

// hostReduceScatter is local replica 0's part: copy each bucket's
// gradients to the host and reduce-scatter it, overlapping the copy of
// the next bucket.
func (z *ZeroRedundancyOptimizer) hostReduceScatter(ctx context.Context, h *zeroHost) error {
	if err := h.buffers(z.buckets); err != nil {
		return err
	}
	start := time.Now()
	var works []*dist.Work
	var failed error
	for i, b := range z.buckets {
		hb := h.buckets[i]
		size := b.dtype.Size()
		clear(hb.full.Bytes()[b.length*size:])
		for _, m := range b.members {
			p := z.params[m.param]
			if err := p.Tensor.Grad().CopyBytesTo(ctx, hb.full.Bytes()[m.offset*size:(m.offset+m.length)*size]); err != nil {
				failed = fmt.Errorf("rank %d: copying the gradient of %s to the host: %w", h.pg.Rank(), p.Name, err)
				break
			}
		}
		if failed != nil {
			h.pg.Fail(failed) // the other ranks wait in this bucket's reduce-scatter
			break
		}
		works = append(works, h.pg.ReduceScatterAsync(hb.block, hb.full, dist.Sum))
	}
	h.hostStats.Download += time.Since(start)
	return h.wait(ctx, works, failed)
}

// allGatherOnHost gathers the updated shards: in-graph over the local
// replicas (each process's block), then, after the program that computes
// the update, across processes on the host; every local replica uploads
// each parameter straight from the gathered bytes.
func (z *ZeroRedundancyOptimizer) allGatherOnHost(ctx context.Context, h *zeroHost) error {
	blocks := make([]*xla.Tensor, len(z.buckets))
	for i, b := range z.buckets {
		blocks[i] = z.masters[i].Detach().Cast(b.dtype)
		if z.local > 1 {
			blocks[i] = xla.AllGather(blocks[i], 0)
		}
	}
	start := time.Now()
	if err := z.dev.MarkStep(ctx); err != nil {
		return err
	}
	h.hostStats.Execute += time.Since(start)
	shared, err := exchange.HostOnce(ctx, z.dev, h.pg.Timeout(), "the parameter all-gather", func() ([]zeroHostBucket, error) {
		err := z.hostAllGather(ctx, h, blocks)
		return h.buckets, err
	})
	if err != nil {
		return err
	}
	start = time.Now()
	defer func() { h.hostStats.Upload += time.Since(start) }()
	for i, b := range z.buckets {
		size := b.dtype.Size()
		full := shared[i].full.Bytes()
		for _, m := range b.members {
			p := z.params[m.param]
			v, err := xla.FromBytes(z.dev, b.dtype, m.dims, full[m.offset*size:(m.offset+m.length)*size])
			if err != nil {
				return fmt.Errorf("uploading %s: %w", p.Name, err)
			}
			if err := p.Tensor.Assign(v); err != nil {
				return fmt.Errorf("assigning %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// hostAllGather is local replica 0's part of allGatherOnHost.
func (z *ZeroRedundancyOptimizer) hostAllGather(ctx context.Context, h *zeroHost, blocks []*xla.Tensor) error {
	if err := h.buffers(z.buckets); err != nil { // a deterministic Step reduced nothing first
		return err
	}
	start := time.Now()
	var works []*dist.Work
	var failed error
	for i, block := range blocks {
		hb := h.buckets[i]
		if err := block.CopyBytesTo(ctx, hb.block.Bytes()); err != nil {
			failed = fmt.Errorf("rank %d: copying the updated shard of bucket %d to the host: %w", h.pg.Rank(), i, err)
			h.pg.Fail(failed)
			break
		}
		works = append(works, h.pg.AllGatherAsync(hb.full, hb.block))
	}
	h.hostStats.Download += time.Since(start)
	return h.wait(ctx, works, failed)
}

// wait waits for every started bucket collective, charging the time to
// AllReduce, and returns failed or else the first collective's error.
func (h *zeroHost) wait(ctx context.Context, works []*dist.Work, failed error) error {
	start := time.Now()
	for _, w := range works {
		if err := w.Wait(ctx); err != nil && failed == nil {
			failed = err
		}
	}
	h.hostStats.AllReduce += time.Since(start)
	return failed
}

// combineScalar combines a scalar across processes: the program computing
// it runs, local replica 0 all-reduces its value on the host, and every
// local replica uploads the result.
func (h *zeroHost) combineScalar(ctx context.Context, dev *xla.Device, partial *xla.Tensor, op xla.ReduceOp) (*xla.Tensor, error) {
	if err := dev.MarkStep(ctx); err != nil {
		return nil, err
	}
	value, err := exchange.HostOnce(ctx, dev, h.pg.Timeout(), "the gradient norm all-reduce", func() ([]byte, error) {
		b := make([]byte, partial.Shape().Memory())
		if err := partial.CopyBytesTo(ctx, b); err != nil {
			return nil, err
		}
		dtype, ok := exchange.HostDType(partial.DType())
		if !ok {
			return nil, fmt.Errorf("a %s gradient norm", partial.DType())
		}
		return b, h.pg.AllReduce(ctx, dist.ByteBuffer(dtype, b), op)
	})
	if err != nil {
		return nil, err
	}
	return xla.FromBytes(dev, partial.DType(), nil, value)
}
