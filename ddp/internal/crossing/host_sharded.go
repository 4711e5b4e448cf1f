package crossing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// shardedBuffer is one Flat's host buffers on local replica 0: the
// padded run (gradients going out, gathered parameters coming back) and
// this process's block of it (the reduced gradients of its local
// replicas' shards), reused from step to step.
type shardedBuffer struct {
	full, block dist.Buffer
}

// errShardedAcrossProcesses: a compiled step cannot hold the host cut.
var errShardedAcrossProcesses = errors.New("the job spans processes, so a sharded optimizer's Step reduce-scatters " +
	"the gradients and gathers the parameters on the host, between programs, and a compiled step is one program: " +
	"compile the forward and backward, and call Step between Runs")

// shardedBuffers allocates the host buffers on first use.
func (h *HostPath) shardedBuffers(flats []*Flat) ([]shardedBuffer, error) {
	if h.sharded != nil {
		return h.sharded, nil
	}
	out := make([]shardedBuffer, len(flats))
	for i, f := range flats {
		dtype, ok := exchange.HostDType(f.DType)
		if !ok {
			return nil, fmt.Errorf("bucket %d holds %s parameters; the host path carries float32, float64 and bfloat16", i, f.DType)
		}
		size := f.DType.Size()
		out[i] = shardedBuffer{
			full:  dist.ByteBuffer(dtype, make([]byte, f.Padded*size)),
			block: dist.ByteBuffer(dtype, make([]byte, f.Padded/h.group.WorldSize()*size)),
		}
	}
	h.sharded = out
	return out, nil
}

// ReduceScatter divides the gradients by the job's replica count and sums
// them over the local replicas in-graph, as MeanGradients does, runs the
// step's program, and reduce-scatters the sums across the processes; each
// local replica uploads its shard of the means.
func (h *HostPath) ReduceScatter(ctx context.Context, dev *xla.Device, params []nn.Named, flats []*Flat) ([]*xla.Tensor, error) {
	if dev.Tracing() {
		return nil, errShardedAcrossProcesses
	}
	index, local := dev.Replica()
	replicas := local * h.group.WorldSize()
	if err := divideAndSumLocally(params, replicas, local); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := dev.MarkStep(ctx); err != nil {
		return nil, err
	}
	h.stats.Execute += time.Since(start)
	shared, err := exchange.HostOnce(ctx, dev, h.group.Timeout(), "the gradient reduce-scatter", func() ([]shardedBuffer, error) {
		return h.hostReduceScatter(ctx, params, flats)
	})
	if err != nil {
		return nil, err
	}
	start = time.Now()
	defer func() { h.stats.Upload += time.Since(start) }()
	out := make([]*xla.Tensor, len(flats))
	for i, f := range flats {
		n := f.ShardLen(replicas)
		part := shared[i].block.Slice(index*n, (index+1)*n)
		if out[i], err = xla.FromBytes(dev, f.DType, []int{n}, part.Bytes()); err != nil {
			return nil, fmt.Errorf("uploading the gradient shard of bucket %d: %w", i, err)
		}
	}
	return out, nil
}

// hostReduceScatter is local replica 0's part: copy each run's gradients
// to the host and reduce-scatter it, overlapping the copy of the next.
func (h *HostPath) hostReduceScatter(ctx context.Context, params []nn.Named, flats []*Flat) ([]shardedBuffer, error) {
	bufs, err := h.shardedBuffers(flats)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var works []*dist.Work
	var failed error
	for i, f := range flats {
		full := bufs[i].full.Bytes()
		size := f.DType.Size()
		clear(full[f.Length*size:])
		for _, m := range f.Members {
			p := params[m.Param]
			if err := p.Tensor.Grad().CopyBytesTo(ctx, full[m.Offset*size:(m.Offset+m.Length)*size]); err != nil {
				failed = fmt.Errorf("rank %d: copying the gradient of %s to the host: %w", h.group.Rank(), p.Name, err)
				break
			}
		}
		if failed != nil {
			h.group.Fail(failed) // the other ranks wait in this run's reduce-scatter
			break
		}
		works = append(works, h.group.ReduceScatterAsync(bufs[i].block, bufs[i].full, dist.Sum))
	}
	h.stats.Download += time.Since(start)
	return bufs, h.wait(ctx, works, failed)
}

// AllGather gathers the updated shards: in-graph over the local replicas
// (each process's block), then, after the program that computes the
// update, across processes on the host; every local replica uploads each
// parameter straight from the gathered bytes.
func (h *HostPath) AllGather(ctx context.Context, dev *xla.Device, params []nn.Named, flats []*Flat, shards []*xla.Tensor) error {
	blocks := make([]*xla.Tensor, len(flats))
	_, local := dev.Replica()
	for i, f := range flats {
		if blocks[i] = shards[i].Cast(f.DType); local > 1 {
			blocks[i] = xla.AllGather(blocks[i], 0)
		}
	}
	start := time.Now()
	if err := dev.MarkStep(ctx); err != nil {
		return err
	}
	h.stats.Execute += time.Since(start)
	shared, err := exchange.HostOnce(ctx, dev, h.group.Timeout(), "the parameter all-gather", func() ([]shardedBuffer, error) {
		return h.hostAllGather(ctx, flats, blocks)
	})
	if err != nil {
		return err
	}
	start = time.Now()
	defer func() { h.stats.Upload += time.Since(start) }()
	for i, f := range flats {
		if err := uploadMembers(dev, params, f, shared[i].full.Bytes()); err != nil {
			return err
		}
	}
	h.stats.Steps++
	return nil
}

// uploadMembers sets each parameter of f from its bytes in full.
func uploadMembers(dev *xla.Device, params []nn.Named, f *Flat, full []byte) error {
	size := f.DType.Size()
	for _, m := range f.Members {
		p := params[m.Param]
		v, err := xla.FromBytes(dev, f.DType, m.Dims, full[m.Offset*size:(m.Offset+m.Length)*size])
		if err != nil {
			return fmt.Errorf("uploading %s: %w", p.Name, err)
		}
		if err := p.Tensor.Assign(v); err != nil {
			return fmt.Errorf("assigning %s: %w", p.Name, err)
		}
	}
	return nil
}

// hostAllGather is local replica 0's part of AllGather.
func (h *HostPath) hostAllGather(ctx context.Context, flats []*Flat, blocks []*xla.Tensor) ([]shardedBuffer, error) {
	bufs, err := h.shardedBuffers(flats) // a deterministic Step reduced nothing first
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var works []*dist.Work
	var failed error
	for i, block := range blocks {
		if err := block.CopyBytesTo(ctx, bufs[i].block.Bytes()); err != nil {
			failed = fmt.Errorf("rank %d: copying the updated shard of bucket %d to the host: %w", h.group.Rank(), i, err)
			h.group.Fail(failed)
			break
		}
		works = append(works, h.group.AllGatherAsync(bufs[i].full, bufs[i].block))
	}
	h.stats.Download += time.Since(start)
	return bufs, h.wait(ctx, works, failed)
}

// wait waits for every started collective, charging the time to
// AllReduce, and returns failed or else the first collective's error.
func (h *HostPath) wait(ctx context.Context, works []*dist.Work, failed error) error {
	start := time.Now()
	for _, w := range works {
		if err := w.Wait(ctx); err != nil && failed == nil {
			failed = err
		}
	}
	h.stats.AllReduce += time.Since(start)
	return failed
}

// CombineScalar combines a scalar over every replica: in-graph over the
// local replicas, then the program computing it runs, local replica 0
// all-reduces its value on the host, and every local replica uploads the
// result.
func (h *HostPath) CombineScalar(ctx context.Context, dev *xla.Device, partial *xla.Tensor, op xla.ReduceOp) (*xla.Tensor, error) {
	if _, local := dev.Replica(); local > 1 {
		partial = xla.AllReduce(partial, op)
	}
	if err := dev.MarkStep(ctx); err != nil {
		return nil, err
	}
	value, err := exchange.HostOnce(ctx, dev, h.group.Timeout(), "the scalar all-reduce", func() ([]byte, error) {
		b := make([]byte, partial.Shape().Memory())
		if err := partial.CopyBytesTo(ctx, b); err != nil {
			return nil, err
		}
		dtype, ok := exchange.HostDType(partial.DType())
		if !ok {
			return nil, fmt.Errorf("a %s scalar", partial.DType())
		}
		return b, h.group.AllReduce(ctx, dist.ByteBuffer(dtype, b), op)
	})
	if err != nil {
		return nil, err
	}
	return xla.FromBytes(dev, partial.DType(), nil, value)
}
