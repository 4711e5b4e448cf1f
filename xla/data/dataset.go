package data

import (
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// Sample is one example: the input values (row-major, InputDims) and the
// target (a class index for classification, TargetDims values otherwise).
type Sample struct {
	Input  []float32
	Target []float32
}

// Dataset is a fixed-size collection of samples of one shape.
type Dataset interface {
	Len() int
	Get(i int) (Sample, error)
	// InputDims are one input's dimensions, e.g. [1, 28, 28].
	InputDims() []int
	// TargetDims are one target's dimensions: none for a class label.
	TargetDims() []int
	// TargetDType is Int32 for class labels, Float32 for regression targets.
	TargetDType() xla.DType
}

// EpochAware datasets draw random transforms per epoch; the Loader calls
// SetEpoch before each epoch so every run repeats.
type EpochAware interface {
	SetEpoch(epoch int)
}

// Sampler chooses which indices an epoch visits, in order.
type Sampler interface {
	Indices(epoch int) []int
}

// SequentialSampler visits 0..n-1.
type SequentialSampler struct{ N int }

// Indices returns 0..N-1.
func (s SequentialSampler) Indices(int) []int {
	out := make([]int, s.N)
	for i := range out {
		out[i] = i
	}
	return out
}

// RandomSampler visits a permutation of 0..n-1 drawn from Seed and the
// epoch, so each epoch differs and every run repeats (torch's RandomSampler
// with a seeded generator).
type RandomSampler struct {
	N    int
	Seed uint64
}

// Indices returns the epoch's permutation.
func (s RandomSampler) Indices(epoch int) []int {
	return rand.New(rand.NewPCG(s.Seed, uint64(epoch))).Perm(s.N)
}
