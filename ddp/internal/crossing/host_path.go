package crossing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// HostPath crosses processes through the host process group: the step is
// cut at the gradient all-reduce. Each replica first divides its
// gradients by the job's replica count and sums them in-graph over its
// process's local replicas, then MarkStep materializes them (with the
// forward and backward that made them); local replica 0 copies them into
// host buckets, in reverse registration order as torch does, starting
// each bucket's all-reduce as soon as it is full, while the next is
// copied; every local replica then uploads the sums (the means), and the
// optimizer update is traced lazily into the next program. Before the
// exchange every replica's random state is gathered, and kept with the
// step once the exchange returned (CombinedRNGStates).
type HostPath struct {
	group            *dist.ProcessGroup
	firstBucketBytes int
	bucketBytes      int
	sharedBuckets    bool
	// Local replica 0's buckets for the layout it last saw, reused while
	// the layout holds.
	layout  string
	buckets []*bucket
	// replicas is the job's replica count, learned by Wrap's broadcast.
	replicas int
	stats    Stats
	// broadcastLayout is the layout of the tensors last broadcast from
	// rank 0, checked with every rank.
	broadcastLayout string
	// sharded is local replica 0's buffers for ReduceScatter and
	// AllGather, allocated on first use.
	sharded []shardedBuffer
	// rngs is every replica's random state of the last step combined.
	rngs replicaRNGs
}

// Stats is where the host path's time goes, summed over its
// gradient all-reduces on this replica: Execute is the MarkStep that
// materializes the gradients (on a synchronous CPU client, the forward
// and backward programs themselves), Download the copies into the
// buckets, AllReduce the wait for the host all-reduces once the last
// bucket is copied (the rest overlaps the copies) and the gathering of
// the replicas' random states before them, Upload the transfer of the
// sums back to the device.
type Stats struct {
	Steps                                int
	Execute, Download, AllReduce, Upload time.Duration
}

// bucket is a run of gradients of one dtype all-reduced as one buffer.
type bucket struct {
	dtype   xla.DType
	buf     dist.Buffer
	members []bucketMember
}

// bucketMember is one gradient's place in its bucket, in elements.
type bucketMember struct {
	param, offset, length int
	dims                  []int
}

// hostResult is what local replica 0 hands the other local replicas.
type hostResult struct {
	layout  string
	buckets []*bucket
}

// NewHostPath is the host path over group: buckets of bucketBytes (the
// first at most firstBucketBytes, so its all-reduce starts early), in
// shared memory where the group has it and sharedBuckets asks (torch's
// gradient_as_bucket_view).
func NewHostPath(group *dist.ProcessGroup, firstBucketBytes, bucketBytes int, sharedBuckets bool) *HostPath {
	return &HostPath{group: group, firstBucketBytes: firstBucketBytes, bucketBytes: bucketBytes, sharedBuckets: sharedBuckets}
}

// Stats is where the host path's time went on this replica so far.
func (h *HostPath) Stats() Stats { return h.stats }

// errCompiledAcrossProcesses: a compiled step cannot hold the host cut.
var errCompiledAcrossProcesses = errors.New("ddp: the job spans processes, so gradients are averaged on the host " +
	"between two programs, and a compiled step is one program: train with lazy steps (MarkStep) across processes, " +
	"or wrap with ddp.ManualSync() and call SyncGradients between a compiled backward step and a compiled optimizer step")

// layoutOf describes params as every rank must see them: name, dtype and
// shape in order. Ranks compare its hash.
func layoutOf(params []nn.Named) string {
	var b strings.Builder
	for _, p := range params {
		fmt.Fprintf(&b, "%s %s%v\n", p.Name, p.Tensor.DType(), p.Tensor.Dims())
	}
	return b.String()
}

func (h *HostPath) MeanGradients(ctx context.Context, dev *xla.Device, params []nn.Named) error {
	if dev.Tracing() {
		return errCompiledAcrossProcesses
	}
	index, count := dev.Replica()
	if h.replicas == 0 {
		return errors.New("ddp: the host path averages only after Wrap's broadcast from rank 0 learned the job's replica count")
	}
	if err := divideAndSumLocally(params, h.replicas, count); err != nil {
		return err
	}
	start := time.Now()
	if err := dev.MarkStep(ctx); err != nil {
		return err
	}
	h.stats.Execute += time.Since(start)
	start = time.Now()
	rngs, err := h.gatherRNGs(ctx, dev)
	if err != nil {
		return err
	}
	h.stats.AllReduce += time.Since(start) // an exchange of the step's too
	layout := layoutOf(params)
	res, err := exchange.HostOnce(ctx, dev, h.group.Timeout(), "the gradient all-reduce", func() (*hostResult, error) {
		return h.reduce(ctx, params, layout, count)
	})
	if err != nil {
		return err
	}
	h.commitRNGs(dev, rngs)
	if res.layout != layout {
		return fmt.Errorf("ddp: local replica %d has gradients for\n%swhile replica 0 has\n%s", index, layout, res.layout)
	}
	start = time.Now()
	err = uploadMeans(dev, params, res)
	h.stats.Upload += time.Since(start)
	h.stats.Steps++
	return err
}

// uploadMeans sets each gradient to its part of its bucket's sum (of
// gradients already divided by the replica count): one upload per
// bucket, the slicing traced into the next program.
func uploadMeans(dev *xla.Device, params []nn.Named, res *hostResult) error {
	for _, b := range res.buckets {
		sums, err := xla.FromBytes(dev, b.dtype, []int{b.buf.Len()}, b.buf.Bytes())
		if err != nil {
			return fmt.Errorf("ddp: uploading a gradient bucket: %w", err)
		}
		for _, m := range b.members {
			g := sums.Narrow(0, m.offset, m.length).Reshape(m.dims...)
			if err := params[m.param].Tensor.SetGrad(g); err != nil {
				return fmt.Errorf("ddp: setting the gradient of %s: %w", params[m.param].Name, err)
			}
		}
	}
	return nil
}

// reduce is local replica 0's part: fill the buckets and all-reduce them
// across the processes, overlapping each bucket's copy with the previous
// bucket's all-reduce.
func (h *HostPath) reduce(ctx context.Context, params []nn.Named, layout string, localReplicas int) (*hostResult, error) {
	if layout != h.layout {
		if err := h.plan(ctx, params, layout, localReplicas); err != nil {
			return nil, err
		}
	}
	var works []*dist.Work
	var failed error
	start := time.Now()
	for _, b := range h.buckets {
		size := b.dtype.Size()
		for _, m := range b.members {
			dst := b.buf.Bytes()[m.offset*size : (m.offset+m.length)*size]
			if err := params[m.param].Tensor.Grad().CopyBytesTo(ctx, dst); err != nil {
				failed = fmt.Errorf("ddp: rank %d: copying the gradient of %s to the host: %w", h.group.Rank(), params[m.param].Name, err)
				break
			}
		}
		if failed != nil {
			// The other ranks wait in this bucket's all-reduce: tell them.
			h.group.Fail(failed)
			break
		}
		if len(h.buckets) == 1 {
			// Nothing to overlap: the caller's goroutine runs it (on one
			// host, without a hand-off to the group's executor).
			h.stats.Download += time.Since(start)
			start = time.Now()
			if err := h.group.AllReduce(ctx, b.buf, dist.Sum); err != nil {
				failed = exchange.ExplainMismatch(ctx, h.group, err, layout, gradientsMismatch)
			}
			break
		}
		works = append(works, h.group.AllReduceAsync(b.buf, dist.Sum))
	}
	if len(works) > 0 {
		h.stats.Download += time.Since(start)
		start = time.Now()
	}
	for _, w := range works {
		if err := w.Wait(ctx); err != nil && failed == nil {
			failed = exchange.ExplainMismatch(ctx, h.group, err, layout, gradientsMismatch)
		}
	}
	h.stats.AllReduce += time.Since(start)
	if failed != nil {
		return nil, failed
	}
	return &hostResult{layout: layout, buckets: h.buckets}, nil
}

// plan lays out the buckets for a new gradient set and checks, with every
// rank, that they all have the same one.
func (h *HostPath) plan(ctx context.Context, params []nn.Named, layout string, localReplicas int) error {
	h.layout, h.buckets = "", nil
	var buckets []*bucket
	open := map[xla.DType]*bucket{}
	bytesIn := map[*bucket]int{}
	for i := len(params) - 1; i >= 0; i-- {
		t := params[i].Tensor
		if _, ok := exchange.HostDType(t.DType()); !ok {
			return fmt.Errorf("ddp: the gradient of %s is %s; the host path all-reduces float32, float64, bfloat16, int32 and int64", params[i].Name, t.DType())
		}
		n := t.Shape().Size()
		size := n * t.DType().Size()
		b := open[t.DType()]
		limit := h.bucketBytes
		if b != nil && b == buckets[0] {
			// torch's small first bucket: its all-reduce starts early.
			limit = h.firstBucketBytes
		}
		if b == nil || (bytesIn[b] > 0 && bytesIn[b]+size > limit) {
			b = &bucket{dtype: t.DType()}
			buckets = append(buckets, b)
			open[t.DType()] = b
		}
		b.members = append(b.members, bucketMember{param: i, offset: bytesIn[b] / t.DType().Size(), length: n, dims: t.Dims()})
		bytesIn[b] += size
	}
	for _, b := range buckets {
		dtype, _ := exchange.HostDType(b.dtype)
		n := bytesIn[b] / b.dtype.Size()
		var err error
		if h.sharedBuckets {
			b.buf, err = h.group.SharedBuffer(dtype, n)
		}
		if !h.sharedBuckets || err != nil {
			// Without room in shared memory, an ordinary buffer (staged).
			b.buf = dist.ByteBuffer(dtype, make([]byte, bytesIn[b]))
		}
	}
	if _, err := exchange.CheckLayout(ctx, h.group, layout, localReplicas, gradientsMismatch); err != nil {
		return err
	}
	h.layout, h.buckets = layout, buckets
	return nil
}

// broadcastResult is what local replica 0 hands the other local replicas
// after the broadcast: rank 0's tensors, packed, and the job's replica
// count.
type broadcastResult struct {
	blob     []byte
	replicas int
}

var (
	gradientsMismatch = exchange.Mismatch{Summary: "ranks averaged different gradient sets (a branch taken on some ranks only? " +
		"ddp.FindUnusedParameters keeps them in step)", Item: "gradient"}
	broadcastMismatch = exchange.Mismatch{Summary: "ranks hold different tensors for the broadcast from rank 0 (do all ranks build " +
		"the same model?)", Item: "tensor"}
)

func (h *HostPath) BroadcastFromFirst(ctx context.Context, dev *xla.Device, tensors []nn.Named) error {
	if dev.Tracing() {
		return errCompiledAcrossProcesses
	}
	_, count := dev.Replica()
	if count > 1 {
		if err := (InGraph{}).BroadcastFromFirst(ctx, dev, tensors); err != nil {
			return err
		}
	}
	if err := dev.MarkStep(ctx); err != nil {
		return err
	}
	offsets, total := packing(tensors)
	layout := layoutOf(tensors)
	res, err := exchange.HostOnce(ctx, dev, h.group.Timeout(), "the broadcast from rank 0", func() (broadcastResult, error) {
		// Ranks whose tensors differ would read rank 0's bytes as theirs
		// (MPI does not check sizes): compare layouts first, once each,
		// and count the job's replicas.
		if layout != h.broadcastLayout {
			replicas, err := exchange.CheckLayout(ctx, h.group, layout, count, broadcastMismatch)
			if err != nil {
				return broadcastResult{}, err
			}
			h.broadcastLayout, h.replicas = layout, replicas
		}
		blob, err := h.broadcastBlob(ctx, tensors, offsets, total)
		return broadcastResult{blob: blob, replicas: h.replicas}, err
	})
	if err != nil {
		return err
	}
	h.replicas = res.replicas
	blob := res.blob
	for i, t := range tensors {
		if t.Tensor.Shape().Size() == 0 {
			continue
		}
		size := int(t.Tensor.Shape().Memory())
		v, err := xla.FromBytes(dev, t.Tensor.DType(), t.Tensor.Dims(), blob[offsets[i]:offsets[i]+size])
		if err != nil {
			return fmt.Errorf("ddp: uploading %s: %w", t.Name, err)
		}
		if err := t.Tensor.Assign(v); err != nil {
			return fmt.Errorf("ddp: assigning %s from rank 0: %w", t.Name, err)
		}
	}
	return nil
}

// packing places tensors in one blob at 8-byte aligned offsets.
func packing(tensors []nn.Named) (offsets []int, total int) {
	offsets = make([]int, len(tensors))
	for i, t := range tensors {
		offsets[i] = total
		total += (int(t.Tensor.Shape().Memory()) + 7) &^ 7
	}
	return offsets, total
}

// broadcastBlob is local replica 0's part: rank 0 packs its values, and
// every rank receives them.
func (h *HostPath) broadcastBlob(ctx context.Context, tensors []nn.Named, offsets []int, total int) ([]byte, error) {
	blob := make([]byte, total)
	if h.group.Rank() == 0 {
		for i, t := range tensors {
			size := int(t.Tensor.Shape().Memory())
			if err := t.Tensor.CopyBytesTo(ctx, blob[offsets[i]:offsets[i]+size]); err != nil {
				err = fmt.Errorf("ddp: rank 0: copying %s to the host: %w", t.Name, err)
				h.group.Fail(err)
				return nil, err
			}
		}
	}
	if total == 0 {
		return blob, nil
	}
	if err := h.group.Broadcast(ctx, dist.ByteBuffer(dist.Int64, blob), 0); err != nil {
		return nil, err
	}
	return blob, nil
}
