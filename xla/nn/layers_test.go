package nn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/internal/reference"
)

// layerCase is a module under test and an independent float64 model of it.
// reference gets the input and the module's parameters (in Params order).
type layerCase struct {
	name      string
	input     []int
	build     func(d *xla.Device) (Module, error)
	reference func(x reference.Tensor, params []reference.Tensor) reference.Tensor
}

// Tolerances: forward 1e-5 absolute + 1e-4 relative; gradients 3e-4
// absolute + 2e-3 relative against float64 central differences (h=1e-6).
const (
	fwdAbs, fwdRel   = 1e-5, 1e-4
	gradAbs, gradRel = 3e-4, 2e-3
	fdStep           = 1e-6
)

// batchNormRef is BatchNorm2d in training mode: batch statistics over N, H, W.
func batchNormRef(x reference.Tensor, w, b reference.Tensor) reference.Tensor {
	n, c, h, wd := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	out := reference.New(x.Dims...)
	count := float64(n * h * wd)
	for ch := range c {
		var mean, sq float64
		for i := range n {
			for p := range h * wd {
				mean += x.V[(i*c+ch)*h*wd+p]
			}
		}
		mean /= count
		for i := range n {
			for p := range h * wd {
				d := x.V[(i*c+ch)*h*wd+p] - mean
				sq += d * d
			}
		}
		inv := 1 / math.Sqrt(sq/count+1e-5)
		for i := range n {
			for p := range h * wd {
				j := (i*c+ch)*h*wd + p
				out.V[j] = (x.V[j]-mean)*inv*w.V[ch] + b.V[ch]
			}
		}
	}
	return out
}

// adaptiveAvgRef is torch's adaptive_avg_pool2d.
func adaptiveAvgRef(x reference.Tensor, oh, ow int) reference.Tensor {
	n, c, h, w := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	out := reference.New(n, c, oh, ow)
	for b := range n * c {
		for i := range oh {
			r0, r1 := i*h/oh, ((i+1)*h+oh-1)/oh
			for j := range ow {
				c0, c1 := j*w/ow, ((j+1)*w+ow-1)/ow
				var s float64
				for r := r0; r < r1; r++ {
					for q := c0; q < c1; q++ {
						s += x.V[(b*h+r)*w+q]
					}
				}
				out.V[(b*oh+i)*ow+j] = s / float64((r1-r0)*(c1-c0))
			}
		}
	}
	return out
}

func linearRef(x reference.Tensor, p []reference.Tensor) reference.Tensor {
	y := reference.MatMul(x, reference.Permute(p[0], []int{1, 0}))
	if len(p) > 1 {
		y = reference.ZipWith(y, p[1], func(a, b float64) float64 { return a + b })
	}
	return y
}

func layerCases() []layerCase {
	return []layerCase{
		{name: "Linear", input: []int{4, 6},
			build:     func(d *xla.Device) (Module, error) { return NewLinear(d, NewRand(1), 6, 3, true) },
			reference: linearRef},
		{name: "Linear no bias, rank 3 input", input: []int{2, 3, 5},
			build:     func(d *xla.Device) (Module, error) { return NewLinear(d, NewRand(2), 5, 4, false) },
			reference: linearRef},
		{name: "Conv2d stride padding bias", input: []int{2, 3, 6, 5},
			build: func(d *xla.Device) (Module, error) {
				return NewConv2d(d, NewRand(3), Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 2, Padding: 1, Bias: true})
			},
			reference: func(x reference.Tensor, p []reference.Tensor) reference.Tensor {
				y := reference.Conv2d(x, p[0], reference.ConvParams{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 1})
				bias := reference.Tensor{Dims: []int{1, 4, 1, 1}, V: p[1].V}
				return reference.ZipWith(y, bias, func(a, b float64) float64 { return a + b })
			}},
		{name: "Conv2d groups", input: []int{1, 4, 5, 5},
			build: func(d *xla.Device) (Module, error) {
				return NewConv2d(d, NewRand(4), Conv2dConfig{In: 4, Out: 6, Kernel: 3, Groups: 2})
			},
			reference: func(x reference.Tensor, p []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x, p[0], reference.ConvParams{Stride: [2]int{1, 1}, Dilation: [2]int{1, 1}, Groups: 2})
			}},
		{name: "BatchNorm2d train", input: []int{3, 2, 3, 4},
			build: func(d *xla.Device) (Module, error) { return NewBatchNorm2d(d, 2) },
			reference: func(x reference.Tensor, p []reference.Tensor) reference.Tensor {
				return batchNormRef(x, p[0], p[1])
			}},
		{name: "MaxPool2d", input: []int{1, 2, 5, 5},
			build: func(*xla.Device) (Module, error) { return NewMaxPool2d(3, 2, 1) },
			reference: func(x reference.Tensor, _ []reference.Tensor) reference.Tensor {
				return reference.Pool2d(x, reference.PoolParams{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true)
			}},
		{name: "AvgPool2d", input: []int{2, 1, 4, 4},
			build: func(*xla.Device) (Module, error) { return NewAvgPool2d(2, 0, 0) },
			reference: func(x reference.Tensor, _ []reference.Tensor) reference.Tensor {
				return reference.Pool2d(x, reference.PoolParams{Kernel: [2]int{2, 2}}, false)
			}},
		{name: "AdaptiveAvgPool2d 5x7 to 3x2", input: []int{2, 2, 5, 7},
			build: func(*xla.Device) (Module, error) { return &AdaptiveAvgPool2d{Height: 3, Width: 2}, nil },
			reference: func(x reference.Tensor, _ []reference.Tensor) reference.Tensor {
				return adaptiveAvgRef(x, 3, 2)
			}},
		{name: "AdaptiveAvgPool2d global", input: []int{2, 3, 4, 4},
			build: func(*xla.Device) (Module, error) { return &AdaptiveAvgPool2d{Height: 1, Width: 1}, nil },
			reference: func(x reference.Tensor, _ []reference.Tensor) reference.Tensor {
				return adaptiveAvgRef(x, 1, 1)
			}},
		{name: "Sequential Linear ReLU Flatten", input: []int{2, 2, 3},
			build: func(d *xla.Device) (Module, error) {
				l, err := NewLinear(d, NewRand(5), 3, 4, true)
				return NewSequential(l, ReLU{}, Flatten{}), err
			},
			reference: func(x reference.Tensor, p []reference.Tensor) reference.Tensor {
				y := linearRef(x, p).Map(func(v float64) float64 { return math.Max(v, 0) })
				y.Dims = []int{2, 8}
				return y
			}},
	}
}

func TestLayersAgainstFloat64Reference(t *testing.T) {
	for ci, tc := range layerCases() {
		t.Run(tc.name, func(t *testing.T) { runLayerCase(t, tc, ci) })
	}
}

// runLayerCase checks one module's forward values and the gradients of
// its input and parameters; seed picks the inputs.
func runLayerCase(t *testing.T, tc layerCase, ci int) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	m, err := tc.build(d)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(uint64(ci), 5))
	xHost := reference.New(tc.input...)
	x32 := make([]float32, len(xHost.V))
	for i := range x32 {
		x32[i] = float32(rng.NormFloat64())
		xHost.V[i] = float64(x32[i])
	}
	x, err := xla.FromSlice(d, x32, tc.input...)
	require.NoError(t, err)
	require.NoError(t, x.SetRequiresGrad(true))
	params := NamedParameters(m)
	hosts := make([]reference.Tensor, len(params))
	for i, p := range params {
		v, err := p.Tensor.Float32s(ctx)
		require.NoError(t, err)
		hosts[i] = reference.Tensor{Dims: slices.Clone(p.Tensor.Dims()), V: toFloat64(v)}
	}
	want := tc.reference(xHost, hosts)
	y := m.Forward(x)
	require.NoError(t, y.Err())
	require.Equal(t, want.Dims, y.Dims())
	r := make([]float32, len(want.V))
	rHost := make([]float64, len(r))
	for i := range r {
		r[i] = float32(rng.NormFloat64())
		rHost[i] = float64(r[i])
	}
	rt, err := xla.FromSlice(d, r, want.Dims...)
	require.NoError(t, err)
	require.NoError(t, y.Mul(rt).Sum().Backward())
	got, err := y.Float32s(ctx)
	require.NoError(t, err)
	for i := range want.V {
		assert.InDelta(t, want.V[i], float64(got[i]), fwdAbs+fwdRel*math.Abs(want.V[i]), "forward[%d]", i)
	}
	loss := func(x reference.Tensor, p []reference.Tensor) float64 {
		out := tc.reference(x, p)
		var s float64
		for i := range out.V {
			s += out.V[i] * rHost[i]
		}
		return s
	}
	check := func(name string, grad *xla.Tensor, values []float64, perturb func(j int, h float64) float64) {
		require.NotNil(t, grad, "%s has a gradient", name)
		g, err := grad.Float32s(ctx)
		require.NoError(t, err)
		for j := range values {
			fd := (perturb(j, fdStep) - perturb(j, -fdStep)) / (2 * fdStep)
			if !assert.InDelta(t, fd, float64(g[j]), gradAbs+gradRel*math.Abs(fd), "d/d %s[%d]", name, j) {
				return
			}
		}
	}
	check("input", x.Grad(), xHost.V, func(j int, h float64) float64 {
		xp := reference.Tensor{Dims: xHost.Dims, V: slices.Clone(xHost.V)}
		xp.V[j] += h
		return loss(xp, hosts)
	})
	for i, p := range params {
		check(p.Name, p.Tensor.Grad(), hosts[i].V, func(j int, h float64) float64 {
			ps := slices.Clone(hosts)
			ps[i] = reference.Tensor{Dims: hosts[i].Dims, V: slices.Clone(hosts[i].V)}
			ps[i].V[j] += h
			return loss(xHost, ps)
		})
	}
}

func toFloat64(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// TestPoolConstructorsRefuseBadSizes: a pool that cannot work is an error
// at construction, as every other constructor's is.
func TestPoolConstructorsRefuseBadSizes(t *testing.T) {
	for _, tc := range []struct {
		kernel, stride, padding int
		want                    string
	}{
		{0, 1, 0, "MaxPool2d(kernel 0): the kernel must be positive"},
		{-3, 1, 0, "the kernel must be positive"},
		{2, -1, 0, "the stride cannot be negative"},
		{2, 2, -1, "the padding must be from 0 to half the kernel 2"},
		{2, 2, 2, "the padding must be from 0 to half the kernel 2"},
	} {
		_, err := NewMaxPool2d(tc.kernel, tc.stride, tc.padding)
		assert.ErrorContains(t, err, tc.want, "%+v", tc)
		_, err = NewAvgPool2d(tc.kernel, tc.stride, tc.padding)
		assert.ErrorContains(t, err, "nn: AvgPool2d(", "%+v", tc)
	}
	p, err := NewMaxPool2d(3, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, [2]int{3, 3}, p.Options.Kernel)
}
