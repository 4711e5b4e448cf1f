package nn

import (
	"fmt"
	"strconv"

	"github.com/xladdp/xladdp/xla"
)

// stateless is embedded by modules without parameters or children.
type stateless struct{}

func (stateless) Params() []Named         { return nil }
func (stateless) Buffers() []Named        { return nil }
func (stateless) Children() []NamedModule { return nil }

// ReLU is max(x, 0).
type ReLU struct{ stateless }

// Forward applies ReLU.
func (ReLU) Forward(x *xla.Tensor) *xla.Tensor { return x.Relu() }

// Flatten keeps the batch dimension and merges the rest.
type Flatten struct{ stateless }

// Forward flattens x.
func (Flatten) Forward(x *xla.Tensor) *xla.Tensor { return x.Flatten() }

// MaxPool2d is torch.nn.MaxPool2d.
type MaxPool2d struct {
	stateless
	Options xla.Pool2dOptions
}

// squarePool is a pool with the same kernel, stride and padding on both
// axes, checked as torch checks them.
func squarePool(name string, kernel, stride, padding int) (xla.Pool2dOptions, error) {
	switch {
	case kernel < 1:
		return xla.Pool2dOptions{}, fmt.Errorf("nn: %s(kernel %d): the kernel must be positive", name, kernel)
	case stride < 0:
		return xla.Pool2dOptions{}, fmt.Errorf("nn: %s(stride %d): the stride cannot be negative (0 means the kernel)", name, stride)
	case padding < 0 || 2*padding > kernel:
		return xla.Pool2dOptions{}, fmt.Errorf("nn: %s(padding %d): the padding must be from 0 to half the kernel %d", name, padding, kernel)
	}
	return xla.Pool2dOptions{Kernel: [2]int{kernel, kernel}, Stride: [2]int{stride, stride}, Padding: [2]int{padding, padding}}, nil
}

// NewMaxPool2d pools with a square kernel, stride (0 means kernel) and padding.
func NewMaxPool2d(kernel, stride, padding int) (*MaxPool2d, error) {
	o, err := squarePool("MaxPool2d", kernel, stride, padding)
	if err != nil {
		return nil, err
	}
	return &MaxPool2d{Options: o}, nil
}

// Forward pools x [N, C, H, W].
func (p *MaxPool2d) Forward(x *xla.Tensor) *xla.Tensor { return xla.MaxPool2d(x, p.Options) }

// AvgPool2d is torch.nn.AvgPool2d (count_include_pad=True).
type AvgPool2d struct {
	stateless
	Options xla.Pool2dOptions
}

// NewAvgPool2d pools with a square kernel, stride (0 means kernel) and padding.
func NewAvgPool2d(kernel, stride, padding int) (*AvgPool2d, error) {
	o, err := squarePool("AvgPool2d", kernel, stride, padding)
	if err != nil {
		return nil, err
	}
	return &AvgPool2d{Options: o}, nil
}

// Forward pools x [N, C, H, W].
func (p *AvgPool2d) Forward(x *xla.Tensor) *xla.Tensor { return xla.AvgPool2d(x, p.Options) }

// AdaptiveAvgPool2d averages x [N, C, H, W] to [N, C, H', W'] with torch's
// windows: output i covers [floor(i·H/H'), ceil((i+1)·H/H')).
type AdaptiveAvgPool2d struct {
	stateless
	Height, Width int
}

// Forward pools x.
func (p *AdaptiveAvgPool2d) Forward(x *xla.Tensor) *xla.Tensor {
	if x.Err() == nil && x.Rank() != 4 {
		return xla.Failed(x, fmt.Errorf("nn: AdaptiveAvgPool2d: needs [N, C, H, W], got %s", x.Shape()))
	}
	if p.Height == 1 && p.Width == 1 {
		return x.Mean(2, 3).Reshape(x.Dims()[0], x.Dims()[1], 1, 1)
	}
	h, w := x.Dims()[2], x.Dims()[3]
	rows := make([]*xla.Tensor, p.Height)
	for i := range p.Height {
		r0, r1 := i*h/p.Height, ((i+1)*h+p.Height-1)/p.Height
		cols := make([]*xla.Tensor, p.Width)
		for j := range p.Width {
			c0, c1 := j*w/p.Width, ((j+1)*w+p.Width-1)/p.Width
			cols[j] = x.Narrow(2, r0, r1-r0).Narrow(3, c0, c1-c0).Mean(2, 3).Reshape(x.Dims()[0], x.Dims()[1], 1, 1)
		}
		rows[i] = xla.Concat(3, cols...)
	}
	return xla.Concat(2, rows...)
}

// Dropout zeroes elements with probability P in training, scaling the rest
// by 1/(1-P); it is the identity in eval. It draws from the device RNG.
type Dropout struct {
	stateless
	P        float64
	training bool
}

// NewDropout returns a Dropout in training mode.
func NewDropout(p float64) (*Dropout, error) {
	if p < 0 || p >= 1 {
		return nil, fmt.Errorf("nn: Dropout probability %g: must be in [0, 1)", p)
	}
	return &Dropout{P: p, training: true}, nil
}

func (d *Dropout) setTraining(on bool) { d.training = on }

// Forward applies dropout.
func (d *Dropout) Forward(x *xla.Tensor) *xla.Tensor {
	if !d.training || d.P == 0 || x.Err() != nil {
		return x
	}
	keep := x.Device().RandU(x.DType(), x.Dims()...).GreaterEqual(x.Device().Full(d.P, x.DType()))
	return xla.Where(keep, x.MulScalar(1/(1-d.P)), x.Device().Zeros(x.DType()))
}

// Sequential applies its modules in order; they are named "0", "1", ...
type Sequential struct {
	Modules []Module
}

// NewSequential chains modules.
func NewSequential(modules ...Module) *Sequential { return &Sequential{Modules: modules} }

// Forward applies each module in turn.
func (s *Sequential) Forward(x *xla.Tensor) *xla.Tensor {
	for _, m := range s.Modules {
		x = m.Forward(x)
	}
	return x
}

// Params returns none (the children own them).
func (s *Sequential) Params() []Named { return nil }

// Buffers returns none.
func (s *Sequential) Buffers() []Named { return nil }

// Children returns the modules named by position.
func (s *Sequential) Children() []NamedModule {
	out := make([]NamedModule, len(s.Modules))
	for i, m := range s.Modules {
		out[i] = NamedModule{Name: strconv.Itoa(i), Module: m}
	}
	return out
}
