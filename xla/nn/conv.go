package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/xladdp/xladdp/xla"
)

// Conv2dConfig configures a Conv2d layer like torch.nn.Conv2d's arguments.
type Conv2dConfig struct {
	In, Out, Kernel int
	Stride, Padding int // Stride 0 means 1
	Groups          int // 0 means 1
	Bias            bool
}

// Conv2d is torch.nn.Conv2d on NCHW input with weight [out, in/groups, k, k].
type Conv2d struct {
	Weight, Bias *xla.Tensor
	opts         xla.Conv2dOptions
}

// NewConv2d creates a Conv2d layer with torch's default init.
func NewConv2d(d *xla.Device, rng *rand.Rand, c Conv2dConfig) (*Conv2d, error) {
	return newConv2d(d, rng, c, false)
}

// newConv2d draws weights from torch's default init, or with kaimingFanOut
// from torchvision ResNet's kaiming_normal_(mode="fan_out", relu).
func newConv2d(d *xla.Device, rng *rand.Rand, c Conv2dConfig, kaimingFanOut bool) (*Conv2d, error) {
	groups := max(c.Groups, 1)
	if c.In < 1 || c.Out < 1 || c.Kernel < 1 || c.In%groups != 0 || c.Out%groups != 0 {
		return nil, fmt.Errorf("nn: Conv2d %+v: channels and kernel must be positive and divisible by groups", c)
	}
	b := &builder{dev: d, rng: rng}
	dims := []int{c.Out, c.In / groups, c.Kernel, c.Kernel}
	fanIn := c.In / groups * c.Kernel * c.Kernel
	var w []float32
	if kaimingFanOut {
		w = b.normal(math.Sqrt(2/float64(c.Out*c.Kernel*c.Kernel)), dims...)
	} else {
		w = b.uniform(defaultBound(fanIn), dims...)
	}
	conv := &Conv2d{Weight: b.param(w, dims...), opts: xla.Conv2dOptions{
		Stride:  [2]int{max(c.Stride, 1), max(c.Stride, 1)},
		Padding: [2]int{c.Padding, c.Padding},
		Groups:  groups,
	}}
	if c.Bias {
		conv.Bias = b.param(b.uniform(defaultBound(fanIn), c.Out), c.Out)
	}
	return conv, b.err
}

// Forward convolves x [N, in, H, W].
func (c *Conv2d) Forward(x *xla.Tensor) *xla.Tensor {
	y := xla.Conv2d(x, c.Weight, c.opts)
	if c.Bias != nil {
		y = y.Add(c.Bias.Reshape(1, -1, 1, 1))
	}
	return y
}

// Params returns weight and bias.
func (c *Conv2d) Params() []Named {
	ps := []Named{{"weight", c.Weight}}
	if c.Bias != nil {
		ps = append(ps, Named{"bias", c.Bias})
	}
	return ps
}

// Buffers returns none.
func (c *Conv2d) Buffers() []Named { return nil }

// Children returns none.
func (c *Conv2d) Children() []NamedModule { return nil }
