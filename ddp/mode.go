package ddp

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/xla/nn"
)

// Mode is how a job's replicas combine their gradients, chosen once
// (Flags' --deterministic and --micro-shard) and handed to every replica
// as Worker.Mode: Run opens the backend for it, Worker.Wrap wraps for it
// (and ddp/training's Feed follows the wrapper), so a program gets either
// mode by its flags alone.
type Mode struct {
	// Deterministic: weights that depend only on the data, the seed, the
	// global batch and the micro-shard size (see Deterministic).
	Deterministic bool
	// MicroShard is the samples of one micro-shard in deterministic mode
	// (0: the program's default, Batch.MicroShard).
	MicroShard int
}

// addFlags registers --deterministic and --micro-shard on fs.
func (m *Mode) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&m.Deterministic, "deterministic", false, "the same trained weights at any world size, launch, transport and restart "+
		"(each global batch cut into --micro-shard samples, summed in one fixed order)")
	fs.Func("micro-shard", "with --deterministic, the samples of one micro-shard: it must divide the global batch, and the replicas "+
		"can be at most the global batch / --micro-shard (default: the program's)", func(s string) error {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return fmt.Errorf("want a sample count of at least 1")
		}
		m.MicroShard = n
		return nil
	})
}

// check refuses a --micro-shard without --deterministic: it would be
// accepted and mean nothing.
func (m Mode) check() error {
	if m.MicroShard != 0 && !m.Deterministic {
		return fmt.Errorf("ddp: --micro-shard %d without --deterministic: the micro-shard is the deterministic mode's; "+
			"add --deterministic or drop --micro-shard", m.MicroShard)
	}
	return nil
}

// Batch is what a program says of its training step to Worker.Wrap: the
// global batch (every replica's samples of a step together), the
// micro-shard a deterministic job cuts it into unless --micro-shard says
// otherwise, and the seed of the data order and of a deterministic
// step's random keys.
type Batch struct {
	Global, MicroShard int
	Seed               uint64
}

// MicroShardFor is the micro-shard of a deterministic job stepping b: the
// flag's, else the program's.
func (m Mode) MicroShardFor(b Batch) int {
	if m.MicroShard > 0 {
		return m.MicroShard
	}
	return b.MicroShard
}

// CheckBatch refuses, before any device opens, a global batch the job's
// mode cannot cut (in deterministic mode, one the micro-shard, the
// flag's, else b.MicroShard, does not divide), and a --micro-shard given
// without --deterministic.
func (m Mode) CheckBatch(b Batch) error {
	if err := m.check(); err != nil {
		return err
	}
	if b.Global < 1 {
		return fmt.Errorf("ddp: a global batch of %d: give at least 1 sample", b.Global)
	}
	if !m.Deterministic {
		return nil
	}
	micro := m.MicroShardFor(b)
	if micro < 1 {
		return fmt.Errorf("ddp: --deterministic: no micro-shard size: give --micro-shard, or Batch.MicroShard as the program's default")
	}
	if _, err := NewMicroShards(b.Global, micro); err != nil {
		return fmt.Errorf("--deterministic with --micro-shard %d: %w", micro, err) // err: "ddp: … the global batch of N"
	}
	return nil
}

// Wrap wraps module for the job's mode: Wrap (DDP) with opts, and in
// deterministic mode with Deterministic(b.Global, the micro-shard,
// b.Seed) too. The wrapper keeps b, which NewFeed reads.
func (w Worker) Wrap(ctx context.Context, module nn.Module, b Batch, opts ...WrapOption) (*DistributedDataParallel, error) {
	if err := w.Mode.CheckBatch(b); err != nil {
		return nil, err
	}
	opts = append(opts, func(c *wrapConfig) { c.batch = b })
	if w.Mode.Deterministic {
		opts = append(opts, Deterministic(b.Global, w.Mode.MicroShardFor(b), b.Seed))
	}
	return Wrap(ctx, module, opts...)
}

// configMode is the checkpoint metadata entry of the wrapper's mode.
const configMode = "ddp.mode"

// CheckpointConfig is the wrapper's mode as its checkpoints record it
// (optim.Configured): a checkpoint of the other mode, or of another cut
// of the global batch, is refused on resume.
func (m *DistributedDataParallel) CheckpointConfig() map[string]string {
	return map[string]string{configMode: m.mode.checkpointed()}
}

// Batch is the program's step as Worker.Wrap (or Deterministic) gave it;
// zero for a wrapper made by Wrap alone.
func (m *DistributedDataParallel) Batch() Batch { return m.cfg.batch }
