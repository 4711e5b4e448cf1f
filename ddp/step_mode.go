package ddp

import "fmt"

// stepMode is how a wrapper's steps combine the replicas' gradients,
// chosen once in Wrap: the plain mode averages them after each Backward
// through the crossing; the deterministic one (*deterministic) sums the
// micro-shards' in BackwardMicroShards, in the canonical order.
type stepMode interface {
	// averagesAfterBackward: whether Backward's hook averages.
	averagesAfterBackward() bool
	// syncRefusal is why SyncGradients cannot run, nil where it can.
	syncRefusal() error
	// broadcastsBuffers: whether Forward hands out replica 0's buffers.
	broadcastsBuffers() bool
	// microShards is the cut and this replica's run of it.
	microShards() (shards MicroShards, first, end int, ok bool)
	// sums is the micro-shard state what needs (BackwardMicroShards, the
	// sampler), or an error naming what.
	sums(what string) (*deterministic, error)
	stats() DeterministicStats
	// checkpointed is the mode as checkpoints record it.
	checkpointed() string
}

// plainMode is the normal mode: torch's DDP.
type plainMode struct{}

func (plainMode) averagesAfterBackward() bool { return true }
func (plainMode) syncRefusal() error          { return nil }
func (plainMode) broadcastsBuffers() bool     { return true }
func (plainMode) microShards() (MicroShards, int, int, bool) {
	return MicroShards{}, 0, 0, false
}
func (plainMode) sums(what string) (*deterministic, error) {
	return nil, fmt.Errorf("ddp: %s on a wrapper made without ddp.Deterministic", what)
}
func (plainMode) stats() DeterministicStats { return DeterministicStats{} }
func (plainMode) checkpointed() string      { return "plain" }

// BackwardMicroShards leaves the averaged gradients; replicas run unequal
// micro-shard counts, and every one ends a step with the same buffers
// (the micro-shards' mean).
func (d *deterministic) averagesAfterBackward() bool { return false }
func (d *deterministic) broadcastsBuffers() bool     { return false }
func (d *deterministic) syncRefusal() error {
	return fmt.Errorf("ddp: SyncGradients on a deterministic wrapper: BackwardMicroShards leaves the averaged gradients")
}
func (d *deterministic) microShards() (MicroShards, int, int, bool) {
	first, end := d.shards.Range(d.replica, d.replicas)
	return d.shards, first, end, true
}
func (d *deterministic) sums(string) (*deterministic, error) { return d, nil }
func (d *deterministic) stats() DeterministicStats           { return d.sum.Stats() }
func (d *deterministic) checkpointed() string {
	return fmt.Sprintf("deterministic: global batch %d, micro-shard %d", d.cfg.globalBatch, d.cfg.microShard)
}
