package ddp

import (
	"errors"
	"fmt"
	"github.com/xladdp/xladdp/ddp/internal/randperm"

	"github.com/xladdp/xladdp/xla/data"
)

// MicroShardSampler is the data order of a deterministic job: each epoch
// is one permutation of the dataset drawn from seed+epoch (torch's, as
// DistributedSampler draws it), cut into global batches, the tail that
// fills no batch dropped; the replica reads its micro-shards of each
// batch, in order, a padding micro-shard repeating its first. So the
// samples of micro-shard m of step s are the same at every world size.
// It implements xla/data.Sampler: a loader with a batch size of the
// micro-shard size yields SlotsPerStep batches a step.
type MicroShardSampler struct {
	n, steps int
	seed     uint64
	shards   MicroShards
	slots    []MicroShard
	// resumeEpoch's first resumeAt samples were used before this run.
	resumeEpoch, resumeAt int
}

// NewMicroShardSampler returns the sampler of a dataset of n samples for
// the replica of model, a wrapper made with Deterministic.
func NewMicroShardSampler(model *DistributedDataParallel, n int, seed uint64) (*MicroShardSampler, error) {
	if model == nil {
		return nil, errors.New("ddp: NewMicroShardSampler of a nil model")
	}
	d, err := model.mode.sums("NewMicroShardSampler")
	if err != nil {
		return nil, err
	}
	shards := d.shards
	if n < shards.GlobalBatch {
		return nil, fmt.Errorf("ddp: a dataset of %d samples fills no global batch of %d", n, shards.GlobalBatch)
	}
	return &MicroShardSampler{n: n, steps: n / shards.GlobalBatch, seed: seed, shards: shards,
		slots: d.mine.Slots}, nil
}

// StepsPerEpoch is the number of global batches in an epoch.
func (s *MicroShardSampler) StepsPerEpoch() int { return s.steps }

// SlotsPerStep is the micro-shards this replica computes each step,
// padding included: the loader batches BackwardMicroShards asks for.
func (s *MicroShardSampler) SlotsPerStep() int { return len(s.slots) }

// ResumeAt says that the first samples of epoch's order were used before:
// a whole number of global batches, whatever the world size that used
// them.
func (s *MicroShardSampler) ResumeAt(epoch, samples int) error {
	if epoch < 0 || samples < 0 {
		return fmt.Errorf("ddp: MicroShardSampler.ResumeAt(epoch %d, %d samples): neither can be negative", epoch, samples)
	}
	if samples%s.shards.GlobalBatch != 0 {
		return fmt.Errorf("ddp: MicroShardSampler.ResumeAt(epoch %d, %d samples): not a whole number of global batches of %d; "+
			"a deterministic run resumes where a step ended, with the global batch it was trained with", epoch, samples, s.shards.GlobalBatch)
	}
	s.resumeEpoch, s.resumeAt = epoch, samples
	return nil
}

// Indices returns this replica's samples of epoch: for each step left,
// its slots' micro-shards, SlotsPerStep × the micro-shard size of them.
func (s *MicroShardSampler) Indices(epoch int) []int {
	order := randperm.Torch(s.n, s.seed+uint64(epoch))
	first := 0
	if epoch == s.resumeEpoch {
		first = min(s.resumeAt/s.shards.GlobalBatch, s.steps)
	}
	out := make([]int, 0, (s.steps-first)*len(s.slots)*s.shards.Size)
	for step := first; step < s.steps; step++ {
		batch := order[step*s.shards.GlobalBatch:]
		for _, sl := range s.slots {
			out = append(out, batch[sl.First:sl.First+sl.Size]...)
		}
	}
	return out
}

// Real returns the batches of a step's slots that are not padding: the
// samples the replica trained on.
func (s *MicroShardSampler) Real(batches []data.Batch) []data.Batch {
	var out []data.Batch
	for i, b := range batches {
		if i < len(s.slots) && !s.slots[i].Padding {
			out = append(out, b)
		}
	}
	return out
}
