package nn

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// builder creates a module's tensors on one device from a seeded host
// generator, keeping the first upload error so constructors check once.
type builder struct {
	dev *xla.Device
	rng *rand.Rand
	err error
}

// NewRand returns the generator layers draw their initial values from; the
// same seed gives the same model on every replica and every run.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6e6e)) }

func (b *builder) upload(values []float32, dims ...int) *xla.Tensor {
	if b.err != nil {
		return nil
	}
	t, err := xla.FromSlice(b.dev, values, dims...)
	if err != nil {
		b.err = err
		return nil
	}
	return t
}

// param uploads values and marks them as requiring gradients.
func (b *builder) param(values []float32, dims ...int) *xla.Tensor {
	t := b.upload(values, dims...)
	if t != nil && b.err == nil {
		b.err = t.SetRequiresGrad(true)
	}
	return t
}

// alloc returns a host slice for a tensor of dims, or nil (and b.err)
// when no tensor can be that large: an impossible size is an error
// before it is an allocation the Go runtime dies of.
func (b *builder) alloc(dims ...int) []float32 {
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, uint64(max(d, 0)))
		if hi != 0 || lo > xla.MaxTensorBytes/4 {
			if b.err == nil {
				b.err = fmt.Errorf("nn: a parameter of %v float32 values is larger than any tensor (xla.MaxTensorBytes, %d bytes)", dims, int64(xla.MaxTensorBytes))
			}
			return nil
		}
		n = lo
	}
	return make([]float32, n)
}

// uniform draws U(-bound, bound): torch's kaiming_uniform_(a=sqrt(5))
// weights and default biases use bound 1/sqrt(fan_in).
func (b *builder) uniform(bound float64, dims ...int) []float32 {
	v := b.alloc(dims...)
	for i := range v {
		v[i] = float32((b.rng.Float64()*2 - 1) * bound)
	}
	return v
}

// normal draws N(0, std): torchvision's kaiming_normal_(fan_out, relu) for
// ResNet convolutions uses std sqrt(2/fan_out).
func (b *builder) normal(std float64, dims ...int) []float32 {
	v := b.alloc(dims...)
	for i := range v {
		v[i] = float32(b.rng.NormFloat64() * std)
	}
	return v
}

func (b *builder) filled(value float32, dims ...int) []float32 {
	v := b.alloc(dims...)
	for i := range v {
		v[i] = value
	}
	return v
}

func defaultBound(fanIn int) float64 { return 1 / math.Sqrt(float64(fanIn)) }
