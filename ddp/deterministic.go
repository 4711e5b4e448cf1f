package ddp

import (
	"context"
	"errors"
	"fmt"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/canonical"
	"github.com/xladdp/xladdp/ddp/internal/crossing"
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

// deterministic is the wrapper's state in deterministic mode.
type deterministic struct {
	cfg    deterministicConfig
	shards MicroShards
	// replica is this replica's global index, replicas the job's count.
	replica, replicas int
	// mine is this replica's plan, fixed by the layout, made once.
	mine canonical.Plan
	sum  *crossing.CanonicalSum
}

// DeterministicStats is where a deterministic step's time goes on this
// replica: Execute the program that forms this replica's sums, Download
// their copies to the host, Exchange the sums across replicas (waits
// included), Upload the mean back.
type DeterministicStats = crossing.CanonicalStats

// DeterministicStats returns this replica's deterministic step times.
func (m *DistributedDataParallel) DeterministicStats() DeterministicStats {
	return m.mode.stats()
}

func newDeterministic(cfg deterministicConfig, dev *xla.Device) (*deterministic, error) {
	shards, err := NewMicroShards(cfg.globalBatch, cfg.microShard)
	if err != nil {
		return nil, err
	}
	index, local := dev.Replica()
	rank, size := processRank()
	d := &deterministic{cfg: cfg, shards: shards, replica: rank*local + index, replicas: size * local}
	if err := shards.CheckReplicas(d.replicas); err != nil {
		return nil, err
	}
	layout := canonical.Layout{Shards: shards, Replicas: d.replicas, Local: local}
	d.mine = layout.PlanOf(d.replica)
	d.sum = crossing.NewCanonicalSum(layout, dist.Current(), d.replica)
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
	return m.mode.microShards()
}

// Deterministic reports whether the wrapper was made with Deterministic.
func (m *DistributedDataParallel) Deterministic() bool {
	_, _, _, ok := m.mode.microShards()
	return ok
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
	d, err := m.startMicroShards(step)
	if err != nil {
		return nil, err
	}
	// The micro-shards' program starts from materialized parameters,
	// whatever made them (the last update, Wrap's broadcast, ZeRO's
	// gather, a checkpoint): a parameter computed inside it would change
	// how the compiler fuses the backward pass, and with it the bits of
	// its sums (a bias gradient's, measured).
	if err := d.sum.Materialize(ctx, m.dev); err != nil {
		return nil, err
	}
	buffers, err := m.startBuffers(ctx)
	if err != nil {
		return nil, err
	}
	pl := d.mine
	leaves := make([]*xla.Tensor, len(pl.Slots))
	for j, s := range pl.Slots {
		s.Step = step
		if leaves[j], err = m.microShard(d, s, buffers, loss); err != nil {
			return nil, err
		}
	}
	items := make([]*xla.Tensor, len(pl.Items))
	for i, n := range pl.Items {
		if pl.Leaves {
			items[i] = leaves[i]
			continue
		}
		first := pl.Slots[0].Index
		items[i] = canonical.SumOver(n, func(k int) *xla.Tensor { return leaves[k-first] }, (*xla.Tensor).Add)
	}
	sum, err := d.sum.Sum(ctx, m.dev, pl, items)
	if err != nil {
		// The step's statistics stand as it found them (a survivor of a
		// lost peer commits the step before it).
		return nil, errors.Join(err, buffers.restore())
	}
	return m.setMeans(sum, buffers, d.shards.Count)
}

// startMicroShards refuses a step BackwardMicroShards cannot take.
func (m *DistributedDataParallel) startMicroShards(step int) (*deterministic, error) {
	d, err := m.mode.sums("BackwardMicroShards")
	switch {
	case err != nil:
		return nil, err
	case m.closed:
		return nil, errors.New("ddp: BackwardMicroShards on a closed wrapper")
	case step < 0:
		return nil, fmt.Errorf("ddp: BackwardMicroShards at step %d: steps count from 0", step)
	}
	for _, p := range m.params {
		if p.Tensor.Grad() != nil {
			return nil, fmt.Errorf("ddp: BackwardMicroShards: %s already has a gradient: call the optimizer's ZeroGrad first "+
				"(a deterministic step computes the whole gradient itself)", p.Name)
		}
	}
	return d, nil
}

// microShard runs one micro-shard's forward and backward from the step's
// buffers, its random state keyed by seed, step and index, and returns
// its gradients laid end to end.
func (m *DistributedDataParallel) microShard(d *deterministic, s MicroShard, buffers *stepBuffers, loss func(MicroShard) (*xla.Tensor, error)) (*xla.Tensor, error) {
	if err := buffers.restore(); err != nil {
		return nil, err
	}
	if err := m.dev.ManualSeed(randomKey(d.cfg.seed, s.Step, s.Index)); err != nil {
		return nil, err
	}
	l, err := loss(s)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("ddp: BackwardMicroShards: the loss of micro-shard %d of step %d is nil", s.Index, s.Step)
	}
	if err := l.Backward(); err != nil {
		return nil, fmt.Errorf("ddp: the backward pass of micro-shard %d of step %d: %w", s.Index, s.Step, err)
	}
	return m.flatGradients(l, buffers)
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
func (m *DistributedDataParallel) setMeans(sum *xla.Tensor, buffers *stepBuffers, shards int) (*xla.Tensor, error) {
	count := float64(shards)
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
