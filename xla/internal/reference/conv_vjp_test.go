package reference

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestConv2dVJPAgainstDifferences: the VJP against central differences
// of Conv2d in float64, with stride, padding, dilation and groups.
func TestConv2dVJPAgainstDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(dims ...int) Tensor {
		h := New(dims...)
		for i := range h.V {
			h.V[i] = rng.NormFloat64()
		}
		return h
	}
	for _, o := range []ConvParams{
		{Stride: [2]int{1, 1}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1},
		{Stride: [2]int{2, 1}, Padding: [2]int{0, 2}, Dilation: [2]int{1, 2}, Groups: 2},
	} {
		x, w := fill(2, 4, 6, 5), fill(4, 4/o.Groups, 3, 3)
		r := fill(Conv2d(x, w, o).Dims...)
		dx, dw := Conv2dVJP(x, w, r, o)
		loss := func() float64 {
			var s float64
			for i, v := range Conv2d(x, w, o).V {
				s += v * r.V[i]
			}
			return s
		}
		const h = 1e-4
		for _, c := range []struct {
			in, grad Tensor
		}{{x, dx}, {w, dw}} {
			for i := range c.in.V {
				was := c.in.V[i]
				c.in.V[i] = was + h
				plus := loss()
				c.in.V[i] = was - h
				minus := loss()
				c.in.V[i] = was
				fd := (plus - minus) / (2 * h)
				assert.InDelta(t, fd, c.grad.V[i], 1e-6*math.Max(1, math.Abs(fd)), "%+v [%d]", o, i)
			}
		}
	}
}
