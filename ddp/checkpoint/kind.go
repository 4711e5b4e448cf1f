package checkpoint

import (
	"fmt"

	"github.com/xladdp/xladdp/xla/optim"
)

// kind is how a checkpoint is laid out, which the optimizer decides: one
// safetensors file written by rank 0 (plain), or a directory of every
// replica's shard (sharded: an optim.ShardedOptimizer, ddp/zero's).
type kind bool

const (
	plain   kind = false
	sharded kind = true
)

// kindOf is the kind of checkpoint opt saves and loads.
func kindOf(opt optim.Optimizer) kind {
	_, ok := opt.(optim.ShardedOptimizer)
	return kind(ok)
}

// name is step's checkpoint name in a checkpointer's directory.
func (k kind) name(step int) string {
	if k == sharded {
		return fmt.Sprintf("step-%012d", step)
	}
	return fmt.Sprintf("step-%012d.safetensors", step)
}

// refuse is the error for a checkpoint at path of the other kind than k:
// what it holds and how to resume it.
func (k kind) refuse(path string) error {
	if k == sharded {
		return fmt.Errorf("checkpoint: %s holds a single-file checkpoint of an optimizer that is not sharded, "+
			"and this job shards its optimizer (ZeRO): resume it without sharding (the examples: without --zero), "+
			"or give this job another checkpoint directory", path)
	}
	return fmt.Errorf("checkpoint: %s holds a sharded checkpoint (a directory of ZeRO shards), "+
		"and this job's optimizer is not sharded: resume it with ddp/zero's optimizer (the examples: --zero), "+
		"consolidate it into one file (zero.ConsolidateCheckpoint), or give this job another checkpoint directory", path)
}
