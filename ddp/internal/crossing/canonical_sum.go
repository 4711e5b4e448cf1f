package crossing

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/canonical"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
)

// CanonicalSum is the deterministic mode's crossing: the replicas'
// micro-shard sums are added over the canonical tree (fixed by the
// micro-shard count alone) on the host, so the result has the same bits
// at every world size. Local replicas hand their sums to local replica
// 0; across processes each process owns a slice of the flat gradient
// (an all-to-all, a fold, an all-gather), and two processes holding a
// half each just all-reduce.
type CanonicalSum struct {
	layout canonical.Layout
	// replica is this replica's global index; process and processes this
	// process's rank and the job's count.
	replica, process, processes int
	group                       *dist.ProcessGroup
	host                        *canonicalHost
	times                       CanonicalStats
	// sent is every process's items, fixed by the layout.
	sent [][]canonical.Node
}

// CanonicalStats is where a deterministic step's time goes on this
// replica: Execute the program that forms this replica's sums, Download
// their copies to the host, Exchange the sums across replicas (waits
// included), Upload the mean back.
type CanonicalStats struct {
	Steps                               int
	Execute, Download, Exchange, Upload time.Duration
	// BytesSent counts this process's bytes handed to other processes.
	BytesSent int64
}

// NewCanonicalSum is replica's canonical sum over layout, its processes
// joined by group.
func NewCanonicalSum(layout canonical.Layout, group *dist.ProcessGroup, replica int) *CanonicalSum {
	c := &CanonicalSum{layout: layout, replica: replica, process: group.Rank(), processes: group.WorldSize(),
		group: group, host: &canonicalHost{}}
	for q := range c.processes {
		c.sent = append(c.sent, layout.ProcessNodes(q))
	}
	return c
}

// Stats is this replica's deterministic step times so far.
func (c *CanonicalSum) Stats() CanonicalStats { return c.times }

// Sum is the job's sum of items (this replica's plan pl) on dev: for a
// job of one replica, items[0] materialized; else summed on the host.
func (c *CanonicalSum) Sum(ctx context.Context, dev *xla.Device, pl canonical.Plan, items []*xla.Tensor) (*xla.Tensor, error) {
	if c.layout.Replicas > 1 {
		return c.exchange(ctx, dev, pl, items)
	}
	// Materialized here, the sum enters the program that divides it and
	// updates the weights as the host's sum does at any other world size:
	// one program's fusions never differ between them.
	if err := c.Materialize(ctx, dev); err != nil {
		return nil, err
	}
	c.times.Steps++
	return items[0], nil
}

// canonicalHost is local replica 0's state for the sums across
// replicas: buffers kept between steps.
type canonicalHost struct {
	pair dist.Buffer // the two-process all-reduce's, shared memory where there is some
	// downloads are this replica's sums on the host, reused each step.
	downloads [][]float32
	in        []float32
	out       []float32
	full      []float32
}

// replicaItems is what one local replica hands to local replica 0: its
// real sums and their nodes.
type replicaItems struct {
	nodes  []canonical.Node
	values [][]float32
}

// Materialize runs the program that forms the replica's sums.
func (c *CanonicalSum) Materialize(ctx context.Context, dev *xla.Device) error {
	if dev.Tracing() {
		return fmt.Errorf("ddp: a deterministic step forms the gradient sum between two programs; " +
			"a compiled step is one program: train with lazy steps (MarkStep)")
	}
	start := time.Now()
	err := dev.MarkStep(ctx)
	c.times.Execute += time.Since(start)
	if errors.Is(err, xla.ErrReplicaMismatch) {
		return fmt.Errorf("%w; in deterministic mode every replica ends each step with its device's MarkStep before any of them "+
			"reads a value (the loss): training.Feed.TrainStep does, or call w.Device.MarkStep(ctx) after the optimizer's Step on every replica", err)
	}
	return err
}

// exchange sums the job's items over the canonical tree on the host and
// returns the sum on dev.
func (c *CanonicalSum) exchange(ctx context.Context, dev *xla.Device, pl canonical.Plan, items []*xla.Tensor) (*xla.Tensor, error) {
	if err := c.Materialize(ctx, dev); err != nil {
		return nil, err
	}
	if c.pair() {
		return c.exchangePair(ctx, dev, items[0])
	}
	start := time.Now()
	var mine replicaItems
	h := c.host
	for len(h.downloads) < len(pl.Items) {
		h.downloads = append(h.downloads, nil)
	}
	for i, n := range pl.Items {
		if pl.Leaves && pl.Slots[i].Padding {
			continue
		}
		h.downloads[i] = resize(h.downloads[i], items[i].Shape().Size())
		if err := items[i].CopyBytesTo(ctx, float32Bytes(h.downloads[i])); err != nil {
			return nil, fmt.Errorf("ddp: replica %d: copying the gradient sum of micro-shards [%d, %d) to the host: %w", c.replica, n.Lo, n.Hi, err)
		}
		mine.nodes, mine.values = append(mine.nodes, n), append(mine.values, h.downloads[i])
	}
	c.times.Download += time.Since(start)
	start = time.Now()
	timeout := exchange.Timeout(c.group)
	all, err := exchange.GatherLocal(ctx, dev, timeout, "the micro-shard gradients", mine)
	if err != nil {
		return nil, err
	}
	sum, err := exchange.HostOnce(ctx, dev, timeout, "the deterministic gradient sum", func() ([]float32, error) {
		var nodes []canonical.Node
		var values [][]float32
		for _, r := range all {
			nodes, values = append(nodes, r.nodes...), append(values, r.values...)
		}
		if c.processes == 1 {
			return canonical.FoldHost(c.layout.Shards.Count, nodes, values), nil
		}
		return c.acrossProcesses(ctx, values)
	})
	if err != nil {
		return nil, err
	}
	c.times.Exchange += time.Since(start)
	return c.upload(dev, sum)
}

// upload puts the sum on dev.
func (c *CanonicalSum) upload(dev *xla.Device, sum []float32) (*xla.Tensor, error) {
	start := time.Now()
	t, err := xla.FromBytes(dev, xla.Float32, []int{len(sum)}, float32Bytes(sum))
	c.times.Upload += time.Since(start)
	c.times.Steps++
	if err != nil {
		return nil, fmt.Errorf("ddp: uploading the gradient sum: %w", err)
	}
	return t, nil
}

func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// acrossProcesses is local replica 0's part across processes: each
// process owns a slice of the flat gradient, receives every process's
// items for it (all-to-all), folds the tree there, and the slices are
// gathered.
func (c *CanonicalSum) acrossProcesses(ctx context.Context, values [][]float32) ([]float32, error) {
	g, R := c.group, c.processes
	n := len(values[0])
	chunk := (n + R - 1) / R
	total := chunk * R
	peers := c.sent
	h := c.host
	mineCount := len(peers[c.process])
	h.in = resize(h.in, mineCount*total)
	inSplits, outSplits := make([]int, R), make([]int, R)
	outLen := 0
	for q := range R {
		for i, v := range values {
			seg := h.in[(q*mineCount+i)*chunk : (q*mineCount+i+1)*chunk]
			lo, hi := min(q*chunk, n), min((q+1)*chunk, n)
			copy(seg, v[lo:hi])
			clear(seg[hi-lo:])
		}
		inSplits[q] = mineCount * chunk
		outSplits[q] = len(peers[q]) * chunk
		outLen += outSplits[q]
	}
	h.out = resize(h.out, outLen)
	if err := g.AllToAllSingle(ctx, dist.Float32s(h.out), dist.Float32s(h.in), outSplits, inSplits); err != nil {
		return nil, err
	}
	var all []canonical.Node
	var slices [][]float32
	at := 0
	for q := range R {
		for _, nd := range peers[q] {
			all, slices = append(all, nd), append(slices, h.out[at:at+chunk])
			at += chunk
		}
	}
	mine := canonical.FoldHost(c.layout.Shards.Count, all, slices)
	h.full = resize(h.full, total)
	if err := g.AllGather(ctx, dist.Float32s(h.full), dist.Float32s(mine)); err != nil {
		return nil, err
	}
	c.times.BytesSent += int64(4 * (inSplits[0]*(R-1) + chunk*(R-1)))
	return h.full[:n], nil
}

func resize(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// pair reports whether the job is two processes of one replica each,
// each holding one half of the tree: their sum is an all-reduce (two
// terms add alike in either order), through shared memory on one host.
func (c *CanonicalSum) pair() bool {
	return c.processes == 2 && c.layout.Local == 1 && len(c.sent[0]) == 1 && len(c.sent[1]) == 1
}

// exchangePair is pair's exchange: the sum downloaded straight into the
// all-reduce's buffer, reduced in place, uploaded from it.
func (c *CanonicalSum) exchangePair(ctx context.Context, dev *xla.Device, sum *xla.Tensor) (*xla.Tensor, error) {
	h, n := c.host, sum.Shape().Size()
	total := (n + 1) / 2 * 2
	if h.pair.Len() != total {
		buf, err := c.group.SharedBuffer(dist.Float32, total)
		if err != nil {
			return nil, err
		}
		h.pair = buf
	}
	pair, err := dist.Values[float32](h.pair)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := sum.CopyBytesTo(ctx, float32Bytes(pair[:n])); err != nil {
		err = fmt.Errorf("ddp: rank %d: copying the gradient sum to the host: %w", c.process, err)
		c.group.Fail(err) // the other rank waits in the all-reduce
		return nil, err
	}
	clear(pair[n:])
	c.times.Download += time.Since(start)
	start = time.Now()
	if err := c.group.AllReduce(ctx, h.pair, dist.Sum); err != nil {
		return nil, err
	}
	c.times.Exchange += time.Since(start)
	c.times.BytesSent += int64(4 * total) // a ring all-reduce's: half the sums out, half the results
	return c.upload(dev, pair[:n])
}
