package main

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
)

// augmented applies the tutorial's RandomCrop(32, padding=4) and
// RandomHorizontalFlip to a normalized [3, 32, 32] dataset, drawn per
// epoch and sample so every run repeats. The padding is black, as
// torchvision pads the image before normalizing.
type augmented struct {
	data.Dataset
	pad   [3]float32 // black, normalized
	seed  uint64
	epoch atomic.Int64
}

func (a *augmented) SetEpoch(epoch int) { a.epoch.Store(int64(epoch)) }

func (a *augmented) Get(i int) (data.Sample, error) {
	s, err := a.Dataset.Get(i)
	if err != nil {
		return s, err
	}
	rng := rand.New(rand.NewPCG(a.seed^uint64(a.epoch.Load())<<32, uint64(i)))
	dx, dy, flip := rng.IntN(9)-4, rng.IntN(9)-4, rng.IntN(2) == 1
	out := make([]float32, len(s.Input))
	for c := range 3 {
		for y := range 32 {
			for x := range 32 {
				sx, sy := x+dx, y+dy
				if flip {
					sx = 31 - x + dx
				}
				v := a.pad[c]
				if sx >= 0 && sx < 32 && sy >= 0 && sy < 32 {
					v = s.Input[c*1024+sy*32+sx]
				}
				out[c*1024+y*32+x] = v
			}
		}
	}
	s.Input = out
	return s, nil
}

// synthetic is CIFAR-shaped data to run without CIFAR-10: each class is a
// fixed random pattern under noise, so a model can learn it.
type synthetic struct {
	n        int
	seed     uint64
	patterns [10][]float32
}

func newSynthetic(n int, seed uint64) *synthetic {
	s := &synthetic{n: n, seed: seed}
	rng := rand.New(rand.NewPCG(seed, 10))
	for c := range s.patterns {
		s.patterns[c] = make([]float32, 3*32*32)
		for i := range s.patterns[c] {
			s.patterns[c][i] = float32(rng.NormFloat64())
		}
	}
	return s
}

func (s *synthetic) Len() int { return s.n }

func (s *synthetic) Get(i int) (data.Sample, error) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(i)+1000))
	label := rng.IntN(10)
	in := make([]float32, 3*32*32)
	for j := range in {
		in[j] = 2*s.patterns[label][j] + float32(rng.NormFloat64())
	}
	return data.Sample{Input: in, Target: []float32{float32(label)}}, nil
}

func (s *synthetic) InputDims() []int       { return []int{3, 32, 32} }
func (s *synthetic) TargetDims() []int      { return nil }
func (s *synthetic) TargetDType() xla.DType { return xla.Int32 }
