package ddp

import (
	"fmt"
	"github.com/xladdp/xladdp/ddp/internal/randperm"
	"slices"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
)

// DistributedSampler is torch's DistributedSampler: it gives each replica
// its share of a dataset's indices per epoch. Every replica shuffles with
// the same permutation, drawn from seed+epoch exactly as torch draws it
// (so a job moved between xladdp and torch visits the same samples), and
// replica r takes positions r, r+R, r+2R…; without DropLast the list is
// first padded to a multiple of R by repeating its head, with it the tail
// is dropped. It implements xla/data.Sampler: pass it as
// LoaderConfig.Sampler, and the loader's epoch number is the epoch.
type DistributedSampler struct {
	n, replicas, rank int
	shuffle, dropLast bool
	seed              uint64
	epoch             int
	replicaSet        bool // an option named the replica
	// resumeEpoch's first resumeAt samples of the global order were used
	// before this run (ResumeAt).
	resumeEpoch, resumeAt int
}

// SamplerOption configures NewDistributedSampler; the defaults are torch's.
type SamplerOption func(*DistributedSampler)

// SamplerReplicas sets the replica count and this sampler's replica
// (torch's num_replicas and rank).
func SamplerReplicas(replicas, rank int) SamplerOption {
	return func(s *DistributedSampler) { s.replicas, s.rank, s.replicaSet = replicas, rank, true }
}

// SamplerForDevice makes the sampler global replica dev's: with local
// replicas (RunReplicas) in each of the default group's processes, rank ×
// local count + local index, of world size × local count.
func SamplerForDevice(dev *xla.Device) SamplerOption {
	return func(s *DistributedSampler) {
		index, count := dev.Replica()
		rank, size := processRank()
		s.replicas, s.rank, s.replicaSet = size*count, rank*count+index, true
	}
}

// NoShuffle visits the indices in order (torch's shuffle=False).
func NoShuffle() SamplerOption { return func(s *DistributedSampler) { s.shuffle = false } }

// SamplerSeed sets the seed every replica must share (default 0).
func SamplerSeed(seed uint64) SamplerOption { return func(s *DistributedSampler) { s.seed = seed } }

// DropLast drops the tail that does not divide evenly instead of padding.
func DropLast() SamplerOption { return func(s *DistributedSampler) { s.dropLast = true } }

// NewDistributedSampler returns the sampler of a dataset of n samples. The
// replica count and this replica's index default to the default process
// group's world size and rank (1 and 0 without one). Inside local
// replicas (--spawn: one process drives several devices) a process is not
// a replica, so the sampler must be told which one it serves:
// SamplerForDevice(w.Device), or SamplerReplicas(w.WorldSize, w.Rank).
// Without either it is an error, not every replica reading the process's
// whole share.
func NewDistributedSampler(n int, opts ...SamplerOption) (*DistributedSampler, error) {
	rank, size := processRank()
	s := &DistributedSampler{n: n, replicas: size, rank: rank, shuffle: true}
	for _, o := range opts {
		o(s)
	}
	if n < 0 {
		return nil, fmt.Errorf("ddp: DistributedSampler of %d samples: the dataset length cannot be negative", n)
	}
	if !s.replicaSet && xla.ReplicasRunning() {
		return nil, fmt.Errorf("ddp: DistributedSampler of %d samples inside local replicas (one process drives several "+
			"devices): say which replica it serves with ddp.SamplerForDevice(w.Device) (or SamplerReplicas(w.WorldSize, w.Rank)); "+
			"counting processes, every replica would read the whole dataset", n)
	}
	if s.replicas < 1 || s.rank < 0 || s.rank >= s.replicas {
		return nil, fmt.Errorf("ddp: DistributedSampler for replica %d of %d: want 0 <= replica < count", s.rank, s.replicas)
	}
	return s, nil
}

// SetEpoch sets the epoch Epoch reports (torch's set_epoch); Indices uses
// the epoch it is given.
func (s *DistributedSampler) SetEpoch(epoch int) { s.epoch = epoch }

// Epoch returns the epoch SetEpoch set.
func (s *DistributedSampler) Epoch() int { return s.epoch }

// Len returns how many indices each replica visits per epoch.
func (s *DistributedSampler) Len() int {
	if s.dropLast && s.n%s.replicas != 0 {
		return (s.n - s.replicas + s.replicas - 1) / s.replicas
	}
	return (s.n + s.replicas - 1) / s.replicas
}

// ResumeAt says that the first samples of epoch's global order were used
// before (a checkpoint's position, counted over all the replicas that
// wrote it): that epoch's Indices split only the rest over this sampler's
// replicas, padded or cut as the whole epoch would be. With as many
// replicas as wrote the checkpoint they are exactly the indices the
// uninterrupted run visits after that position; with more or fewer, every
// sample of the epoch is still visited once. The other epochs are whole.
func (s *DistributedSampler) ResumeAt(epoch, samples int) error {
	if epoch < 0 || samples < 0 {
		return fmt.Errorf("ddp: DistributedSampler.ResumeAt(epoch %d, %d samples): neither can be negative", epoch, samples)
	}
	s.resumeEpoch, s.resumeAt = epoch, samples
	return nil
}

// Indices returns this replica's indices for epoch.
func (s *DistributedSampler) Indices(epoch int) []int {
	var order []int
	if s.shuffle {
		order = randperm.Torch(s.n, s.seed+uint64(epoch))
	} else {
		order = make([]int, s.n)
		for i := range order {
			order[i] = i
		}
	}
	all := order
	if epoch == s.resumeEpoch && s.resumeAt > 0 {
		all = slices.Clone(order[min(s.resumeAt, len(order)):])
	}
	total := (len(all) + s.replicas - 1) / s.replicas * s.replicas
	if s.dropLast {
		total = len(all) / s.replicas * s.replicas
	}
	// Pad by repeating the head of the epoch's order, cycling when it is
	// shorter than the padding (torch's rule; a resumed epoch pads as
	// the whole one would).
	for i := 0; len(all) < total; i++ {
		all = append(all, order[i%len(order)])
	}
	all = all[:total]
	out := make([]int, 0, total/s.replicas)
	for i := s.rank; i < total; i += s.replicas {
		out = append(out, all[i])
	}
	return out
}

// processRank is this process's rank and the job's process count.
func processRank() (rank, size int) {
	g := dist.Current()
	return g.Rank(), g.WorldSize()
}
