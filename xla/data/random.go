package data

import (
	"fmt"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// Random is a dataset of standard-normal inputs and either class labels
// (Classes > 0) or standard-normal targets of TargetShape, the same for a
// given seed (the MPI/SageMaker basics tutorials' random dataset).
type Random struct {
	n                     int
	inputDims, targetDims []int
	classes               int
	seed                  uint64
}

// NewRandom returns n samples of inputDims; with classes > 0 the targets are
// labels in [0, classes), else values of targetDims.
func NewRandom(n int, inputDims, targetDims []int, classes int, seed uint64) (*Random, error) {
	if n < 1 || product(inputDims) < 1 || classes < 0 {
		return nil, fmt.Errorf("data: random dataset of %d samples of %v with %d classes: sizes must be positive", n, inputDims, classes)
	}
	if classes > 0 {
		targetDims = nil
	}
	return &Random{n: n, inputDims: inputDims, targetDims: targetDims, classes: classes, seed: seed}, nil
}

// Len returns the number of samples.
func (r *Random) Len() int { return r.n }

// Get draws sample i from a generator seeded by the dataset seed and i.
func (r *Random) Get(i int) (Sample, error) {
	if i < 0 || i >= r.n {
		return Sample{}, fmt.Errorf("data: random dataset index %d outside [0, %d)", i, r.n)
	}
	rng := rand.New(rand.NewPCG(r.seed, uint64(i)))
	in := make([]float32, product(r.inputDims))
	for k := range in {
		in[k] = float32(rng.NormFloat64())
	}
	if r.classes > 0 {
		return Sample{Input: in, Target: []float32{float32(rng.IntN(r.classes))}}, nil
	}
	tg := make([]float32, product(r.targetDims))
	for k := range tg {
		tg[k] = float32(rng.NormFloat64())
	}
	return Sample{Input: in, Target: tg}, nil
}

// InputDims returns the input dimensions.
func (r *Random) InputDims() []int { return r.inputDims }

// TargetDims returns the target dimensions (none for labels).
func (r *Random) TargetDims() []int { return r.targetDims }

// TargetDType is Int32 for labels, Float32 otherwise.
func (r *Random) TargetDType() xla.DType {
	if r.classes > 0 {
		return xla.Int32
	}
	return xla.Float32
}
