package canonical

import "fmt"

// Shards is how a deterministic job cuts each global batch: Count
// micro-shards of Size samples, micro-shard m holding the batch's samples
// [m·Size, (m+1)·Size). It depends on the global batch and the micro-shard
// size only, never on the replicas that run it: that is what makes the
// trained weights the same at every world size.
type Shards struct {
	GlobalBatch, Size, Count int
}

// NewShards checks that size divides the global batch.
func NewShards(globalBatch, size int) (Shards, error) {
	switch {
	case globalBatch < 1 || size < 1:
		return Shards{}, fmt.Errorf("ddp: micro-shards of %d samples in a global batch of %d: both must be positive", size, globalBatch)
	case globalBatch%size != 0:
		return Shards{}, fmt.Errorf("ddp: a micro-shard of %d samples does not divide the global batch of %d: "+
			"pick a micro-shard size that does (a divisor of %d)", size, globalBatch, globalBatch)
	}
	return Shards{GlobalBatch: globalBatch, Size: size, Count: globalBatch / size}, nil
}

// Range is the run of micro-shards [first, end) global replica replica of
// replicas computes: contiguous, the first Count mod replicas replicas
// taking one more.
func (s Shards) Range(replica, replicas int) (first, end int) {
	base, extra := s.Count/replicas, s.Count%replicas
	first = replica*base + min(replica, extra)
	end = first + base
	if replica < extra {
		end++
	}
	return first, end
}

// CheckReplicas refuses a world size with more replicas than micro-shards:
// some replica would have nothing to compute.
func (s Shards) CheckReplicas(replicas int) error {
	if replicas > s.Count {
		return fmt.Errorf("ddp: %d replicas for %d micro-shards of %d samples (global batch %d): every replica needs one; "+
			"use a smaller micro-shard size (it must divide %d) or fewer replicas", replicas, s.Count, s.Size, s.GlobalBatch, s.GlobalBatch)
	}
	return nil
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
