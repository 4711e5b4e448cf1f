package ddp

import (
	"context"
	"errors"
	"fmt"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
)

// Deterministic makes the wrapper train so that its weights depend only
// on the data, seed, the global batch and the micro-shard size: not on
// the number of processes, local replicas or nodes, the launch, the
// transport, ZeRO or restarts. Each global batch is cut into micro-shards
// of microShard samples (MicroShards); each replica computes the
// gradients of its run of them with BackwardMicroShards, one micro-shard
// at a time, its device's random state keyed by seed, step and
// micro-shard; the gradients are summed over a summation tree fixed by
// the micro-shard count alone, then divided by it. Backward no longer
// averages by itself.
func Deterministic(globalBatch, microShard int, seed uint64) WrapOption {
	return func(c *wrapConfig) {
		c.deterministic = &deterministicConfig{globalBatch: globalBatch, microShard: microShard, seed: seed}
		c.batch = Batch{Global: globalBatch, MicroShard: microShard, Seed: seed}
	}
}

type deterministicConfig struct {
	globalBatch, microShard int
	seed                    uint64
}

// MicroShard is one micro-shard a replica computes in a step.
type MicroShard struct {
	// Step is the step BackwardMicroShards was given; Slot the
	// micro-shard's place among this replica's of the step (the order
	// of MicroShardSampler's batches); Index its place in the step's
	// global batch, whose samples [First, First+Size) it holds.
	Step, Slot, Index, First, Size int
	// Padding marks a repeat of the replica's first micro-shard, computed
	// only so that every local replica of a process runs the same program
	// (the engine compiles one for all); its gradient is dropped.
	Padding bool
}

// deterministic is the wrapper's state in deterministic mode.
type deterministic struct {
	cfg    deterministicConfig
	shards MicroShards
	// replica is this replica's global index, replicas the job's count,
	// processes and local the processes and local replicas per process.
	replica, replicas, process, processes, local int
	group                                        *dist.ProcessGroup // nil in a job of one process
	host                                         *deterministicHost
	stats                                        DeterministicStats
	// mine is this replica's plan, sent every process's items: fixed by
	// the layout, made once.
	mine plan
	sent [][]treeNode
}

func newDeterministic(cfg deterministicConfig, dev *xla.Device) (*deterministic, error) {
	shards, err := NewMicroShards(cfg.globalBatch, cfg.microShard)
	if err != nil {
		return nil, err
	}
	index, local := dev.Replica()
	rank, size := processRank()
	d := &deterministic{cfg: cfg, shards: shards, replica: rank*local + index, replicas: size * local,
		process: rank, processes: size, local: local, group: dist.Default(), host: &deterministicHost{}}
	if err := shards.CheckReplicas(d.replicas); err != nil {
		return nil, err
	}
	d.mine = d.planOf(d.replica)
	for q := range d.processes {
		d.sent = append(d.sent, d.processNodes(q))
	}
	if b, most := dev.Engine().Backend(), backend.DeterministicCPUDevices(); b.Target() == backend.CPU && local > most {
		return nil, fmt.Errorf("ddp: Deterministic with %d local replicas in one process: at most %d on the cpu target of this "+
			"machine (a deterministic client has %d devices, whose thread pool sets how XLA splits its sums); run more processes",
			local, most, most)
	}
	if b := dev.Engine().Backend(); !b.Deterministic() {
		return nil, fmt.Errorf("ddp: Deterministic on a %s backend opened without backend.Options.Deterministic "+
			"(ddp.Options.Device.Deterministic, $%s=1, the examples' --deterministic): its kernels may sum in an order "+
			"that follows the device count or the threads (on the cpu target, reductions and convolutions do)", b.Target(), backend.EnvDeterministic)
	}
	return d, nil
}

// MicroShards is the deterministic wrapper's cut of the global batch, and
// this replica's run of it [first, end); ok is false for a wrapper made
// without Deterministic.
func (m *DistributedDataParallel) MicroShards() (shards MicroShards, first, end int, ok bool) {
	if m.det == nil {
		return MicroShards{}, 0, 0, false
	}
	first, end = m.det.shards.Range(m.det.replica, m.det.replicas)
	return m.det.shards, first, end, true
}

// Deterministic reports whether the wrapper was made with Deterministic.
func (m *DistributedDataParallel) Deterministic() bool { return m.det != nil }

// plan is what a replica computes in every step: its slots (micro-shards,
// padding included; Step left 0) and the sums it hands on (items), in
// tree order.
type plan struct {
	slots []MicroShard
	// items are covering nodes of the replica's micro-shards, or with
	// leaves, every slot's own gradient (padding dropped on the host).
	items  []treeNode
	leaves bool
}

// planOf is global replica r's plan: its covering nodes, unless a local
// replica of its process has another shape of work, when every one of
// them sends its leaves, padded to the most micro-shards any of them has.
func (d *deterministic) planOf(r int) plan {
	first, end := d.shards.Range(r, d.replicas)
	var p plan
	shape := func(q int) string {
		f, e := d.shards.Range(q, d.replicas)
		var s []int
		for _, n := range coveringNodes(d.shards.Count, f, e) {
			s = append(s, n.hi-n.lo)
		}
		return fmt.Sprint(s)
	}
	slots := end - first
	base := r - r%d.local
	for q := base; q < base+d.local; q++ {
		f, e := d.shards.Range(q, d.replicas)
		slots = max(slots, e-f)
		if shape(q) != shape(r) {
			p.leaves = true
		}
	}
	for j := range slots {
		s := MicroShard{Slot: j, Index: first + j, Size: d.shards.Size}
		if first+j >= end {
			s.Index, s.Padding = first, true
		}
		s.First = s.Index * s.Size
		p.slots = append(p.slots, s)
		if p.leaves {
			p.items = append(p.items, treeNode{s.Index, s.Index + 1})
		}
	}
	if !p.leaves {
		p.items = coveringNodes(d.shards.Count, first, end)
	}
	return p
}

// processNodes is process q's real items, in tree order: what it sends.
func (d *deterministic) processNodes(q int) []treeNode {
	var out []treeNode
	for r := q * d.local; r < (q+1)*d.local; r++ {
		p := d.planOf(r)
		for j, n := range p.items {
			if !p.leaves || !p.slots[j].Padding {
				out = append(out, n)
			}
		}
	}
	return out
}

// randomKey is the device's random state for a micro-shard: the same
// wherever it runs (splitmix64 of seed, step and index).
func randomKey(seed uint64, step, index int) int64 {
	x := seed
	for _, v := range []uint64{uint64(step), uint64(index)} {
		x += 0x9e3779b97f4a7c15 + v
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
	}
	return int64(x >> 1)
}

// BackwardMicroShards computes this replica's micro-shards of step (a
// count of steps since training began: it keys the random state, so a
// resumed run passes the step it resumes at) and leaves in every
// parameter's gradient the mean over the global batch, summed in the
// canonical order. loss returns the scalar loss (the mean over its
// samples) of one micro-shard; every replica calls BackwardMicroShards at
// the same point. The gradients must be clear (ZeroGrad) before. It
// returns the loss of the global batch, the micro-shards' losses summed
// as the gradients are: the same at every world size.
//
// Every micro-shard's loss and gradients leave its program the same way
// wherever it runs: a value read from one micro-shard's computation and
// not another's (its loss, for a log line) would change how the compiler
// fuses it, and with that its bits. Read the returned loss instead.
func (m *DistributedDataParallel) BackwardMicroShards(ctx context.Context, step int, loss func(MicroShard) (*xla.Tensor, error)) (*xla.Tensor, error) {
	if m.det == nil {
		return nil, errors.New("ddp: BackwardMicroShards on a wrapper made without ddp.Deterministic")
	}
	if m.closed {
		return nil, errors.New("ddp: BackwardMicroShards on a closed wrapper")
	}
	if step < 0 {
		return nil, fmt.Errorf("ddp: BackwardMicroShards at step %d: steps count from 0", step)
	}
	for _, p := range m.params {
		if p.Tensor.Grad() != nil {
			return nil, fmt.Errorf("ddp: BackwardMicroShards: %s already has a gradient: call the optimizer's ZeroGrad first "+
				"(a deterministic step computes the whole gradient itself)", p.Name)
		}
	}
	// The micro-shards' program starts from materialized parameters,
	// whatever made them (the last update, Wrap's broadcast, ZeRO's
	// gather, a checkpoint): a parameter computed inside it would change
	// how the compiler fuses the backward pass, and with it the bits of
	// its sums (a bias gradient's, measured).
	if err := m.det.materialize(ctx, m.dev); err != nil {
		return nil, err
	}
	buffers, err := m.startBuffers(ctx)
	if err != nil {
		return nil, err
	}
	pl := m.det.mine
	leaves := make([]*xla.Tensor, len(pl.slots))
	for j, s := range pl.slots {
		s.Step = step
		if err := buffers.restore(); err != nil {
			return nil, err
		}
		if err := m.dev.ManualSeed(randomKey(m.det.cfg.seed, step, s.Index)); err != nil {
			return nil, err
		}
		l, err := loss(s)
		if err != nil {
			return nil, err
		}
		if l == nil {
			return nil, fmt.Errorf("ddp: BackwardMicroShards: the loss of micro-shard %d of step %d is nil", s.Index, step)
		}
		if err := l.Backward(); err != nil {
			return nil, fmt.Errorf("ddp: the backward pass of micro-shard %d of step %d: %w", s.Index, step, err)
		}
		if leaves[j], err = m.flatGradients(l, buffers); err != nil {
			return nil, err
		}
	}
	items := make([]*xla.Tensor, len(pl.items))
	for i, n := range pl.items {
		if pl.leaves {
			items[i] = leaves[i]
			continue
		}
		first := pl.slots[0].Index
		items[i] = sumOver(n, func(k int) *xla.Tensor { return leaves[k-first] }, (*xla.Tensor).Add)
	}
	var sum *xla.Tensor
	if m.det.replicas == 1 {
		// Materialized here, the sum enters the program that divides it
		// and updates the weights as the host's sum does at any other
		// world size: one program's fusions never differ between them.
		if err := m.det.materialize(ctx, m.dev); err != nil {
			return nil, err
		}
		sum = items[0]
		m.det.stats.Steps++
	} else {
		var err error
		if sum, err = m.det.exchange(ctx, m.dev, pl, items); err != nil {
			return nil, err
		}
	}
	return m.setMeans(sum, buffers)
}

// sumOver forms node n's sum of the canonical tree from its leaves.
func sumOver[T any](n treeNode, leaf func(int) T, add func(a, b T) T) T {
	if n.leaf() {
		return leaf(n.lo)
	}
	l, r := n.halves()
	return add(sumOver(l, leaf, add), sumOver(r, leaf, add))
}

// flatGradients lays the parameters' gradients end to end in float32 (a
// parameter the loss did not reach contributes zeros), then the loss and
// the buffers' updates, and clears the gradients.
func (m *DistributedDataParallel) flatGradients(loss *xla.Tensor, buffers *stepBuffers) (*xla.Tensor, error) {
	parts := make([]*xla.Tensor, len(m.params)+1)
	parts[len(m.params)] = loss.Detach().Cast(xla.Float32).Reshape(1)
	parts = append(parts, buffers.updates()...)
	for i, p := range m.params {
		g := p.Tensor.Grad()
		if g == nil {
			g = m.dev.Zeros(xla.Float32, p.Tensor.Dims()...)
		}
		parts[i] = g.Cast(xla.Float32).Reshape(p.Tensor.Shape().Size())
		p.Tensor.ZeroGrad()
	}
	flat := xla.Concat(0, parts...)
	return flat, flat.Err()
}

// setMeans divides the canonical sum by the micro-shard count and hands
// each parameter and buffer its part: the same operations whether sum
// was formed on this device or came from the host. It returns the mean
// loss.
func (m *DistributedDataParallel) setMeans(sum *xla.Tensor, buffers *stepBuffers) (*xla.Tensor, error) {
	count := float64(m.det.shards.Count)
	offset := 0
	for _, p := range m.params {
		n := p.Tensor.Shape().Size()
		g := sum.Narrow(0, offset, n).Reshape(p.Tensor.Dims()...).DivScalar(count).Cast(p.Tensor.DType())
		if err := p.Tensor.SetGrad(g); err != nil {
			return nil, fmt.Errorf("ddp: setting the gradient of %s: %w", p.Name, err)
		}
		offset += n
	}
	if err := buffers.setMeans(sum, offset+1, count); err != nil {
		return nil, err
	}
	m.syncs++
	loss := sum.Narrow(0, offset, 1).Reshape().DivScalar(count)
	return loss, loss.Err()
}
