package ddp

import "github.com/xladdp/xladdp/ddp/internal/canonical"

// MicroShards is how a deterministic job cuts each global batch: Count
// micro-shards of Size samples, micro-shard m holding the batch's samples
// [m·Size, (m+1)·Size), whatever the replicas that run it (Range gives
// replica r its contiguous run).
type MicroShards = canonical.Shards

// MicroShard is one micro-shard a replica computes in a step (Step, Slot,
// Index, First, Size; Padding marks a repeat whose gradient is dropped).
type MicroShard = canonical.MicroShard

// NewMicroShards checks that size divides the global batch.
func NewMicroShards(globalBatch, size int) (MicroShards, error) {
	return canonical.NewShards(globalBatch, size)
}
