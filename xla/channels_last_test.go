package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla/internal/reference"
)

// Host stand-ins for the chains below.
func hostBias(x, b reference.Tensor) reference.Tensor {
	return reference.ZipWith(x, reference.Tensor{Dims: []int{1, b.Dims[0], 1, 1}, V: b.V}, func(p, q float64) float64 { return p + q })
}

func hostRelu(x reference.Tensor) reference.Tensor {
	return x.Map(func(v float64) float64 { return max(v, 0) })
}

func hostConv(x, w reference.Tensor) reference.Tensor {
	return reference.Conv2d(x, w, convParams(Conv2dOptions{}))
}

func hostMaxPool(x reference.Tensor, k, s, p int) reference.Tensor {
	return reference.Pool2d(x, reference.PoolParams{Kernel: [2]int{k, k}, Stride: [2]int{s, s}, Padding: [2]int{p, p}}, true)
}

func maxPool(x *Tensor, k, s, p int) *Tensor {
	return MaxPool2d(x, Pool2dOptions{Kernel: [2]int{k, k}, Stride: [2]int{s, s}, Padding: [2]int{p, p}})
}

// TestChannelsLastChainsAgainstFloat64Reference checks chains that replay
// channels-last (convolutions, the elementwise ops after them, pools) and
// the NCHW consumers around them (reshape, reduction, plain NCHW operands,
// Bool conditions), forward and gradients, against the float64 reference
// and central differences, as the op table does.
func TestChannelsLastChainsAgainstFloat64Reference(t *testing.T) {
	cases := []opCase{
		{name: "conv bias relu maxpool2 flatten", inputs: [][]int{{2, 3, 7, 6}, {4, 3, 3, 3}, {4}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return maxPool(Conv2d(x[0], x[1], Conv2dOptions{}).Add(x[2].Reshape(1, -1, 1, 1)).Relu(), 2, 2, 0).Flatten()
			},
			host: func(x []reference.Tensor) reference.Tensor {
				out := hostMaxPool(hostRelu(hostBias(hostConv(x[0], x[1]), x[2])), 2, 2, 0)
				return reference.Tensor{Dims: []int{2, len(out.V) / 2}, V: out.V}
			}},
		{name: "two convs channels-last, a sum over channels", inputs: [][]int{{1, 2, 7, 7}, {3, 2, 3, 3}, {2, 3, 3, 3}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return Conv2d(Conv2d(x[0], x[1], Conv2dOptions{}).Tanh(), x[2], Conv2dOptions{}).Sum(1)
			},
			host: func(x []reference.Tensor) reference.Tensor {
				h := hostConv(hostConv(x[0], x[1]).Map(math.Tanh), x[2])
				return reference.Reduce(h, []int{1}, 0, func(a, v float64) float64 { return a + v })
			}},
		{name: "conv times a full NCHW operand, where on a comparison", inputs: [][]int{{2, 2, 5, 6}, {3, 2, 2, 3}, {2, 3, 4, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				c := Conv2d(x[0], x[1], Conv2dOptions{})
				return Where(c.Greater(x[2]), c.Mul(x[2]), x[2].MulScalar(0.5))
			},
			host: func(x []reference.Tensor) reference.Tensor {
				c := hostConv(x[0], x[1])
				return reference.ZipWith(c, x[2], func(p, q float64) float64 {
					if p > q {
						return p * q
					}
					return q / 2
				})
			}},
		{name: "conv times a per-pixel [N,1,H,W] operand, then avgpool", inputs: [][]int{{2, 2, 5, 5}, {3, 2, 2, 2}, {2, 1, 4, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return AvgPool2d(Conv2d(x[0], x[1], Conv2dOptions{}).Mul(x[2]).AddScalar(1), Pool2dOptions{Kernel: [2]int{2, 2}})
			},
			host: func(x []reference.Tensor) reference.Tensor {
				h := reference.ZipWith(hostConv(x[0], x[1]), x[2], func(p, q float64) float64 { return p*q + 1 })
				return reference.Pool2d(h, reference.PoolParams{Kernel: [2]int{2, 2}}, false)
			}},
		{name: "conv then tiled maxpool3 past the edge", inputs: [][]int{{1, 2, 9, 10}, {2, 2, 1, 1}},
			device: func(_ *Device, x []*Tensor) *Tensor { return maxPool(Conv2d(x[0], x[1], Conv2dOptions{}), 3, 3, 0) },
			host:   func(x []reference.Tensor) reference.Tensor { return hostMaxPool(hostConv(x[0], x[1]), 3, 3, 0) }},
		{name: "conv then overlapping padded maxpool", inputs: [][]int{{1, 2, 7, 7}, {3, 2, 2, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor { return maxPool(Conv2d(x[0], x[1], Conv2dOptions{}), 3, 2, 1) },
			host:   func(x []reference.Tensor) reference.Tensor { return hostMaxPool(hostConv(x[0], x[1]), 3, 2, 1) }},
		{name: "tiled maxpool2 NCHW, odd sizes", inputs: [][]int{{1, 2, 5, 7}},
			device: func(_ *Device, x []*Tensor) *Tensor { return maxPool(x[0], 2, 2, 0) },
			host:   func(x []reference.Tensor) reference.Tensor { return hostMaxPool(x[0], 2, 2, 0) }},
		{name: "maxpool k2 s1 NCHW", inputs: [][]int{{1, 1, 4, 5}},
			device: func(_ *Device, x []*Tensor) *Tensor { return maxPool(x[0], 2, 1, 0) },
			host:   func(x []reference.Tensor) reference.Tensor { return hostMaxPool(x[0], 2, 1, 0) }},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runOpCase(t, tc, 500+ci) })
	}
}

// firstMaxGrad is the max-pool gradient of sum(maxpool(x) * v): each
// window's gradient goes to its first maximum in row-major order (torch's
// choice); a window holding NaN pools to NaN and passes none.
func firstMaxGrad(x reference.Tensor, v []float64, k, s, p int) []float64 {
	n, c, h, w := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	oh, ow := (h+2*p-k)/s+1, (w+2*p-k)/s+1
	grad := make([]float64, len(x.V))
	for b := range n * c {
		for i := range oh {
			for j := range ow {
				best, at, nan := math.Inf(-1), -1, false
				for a := range k {
					for q := range k {
						y, z := i*s-p+a, j*s-p+q
						if y < 0 || y >= h || z < 0 || z >= w {
							continue
						}
						off := (b*h+y)*w + z
						val := x.V[off]
						nan = nan || math.IsNaN(val)
						if at < 0 || val > best {
							best, at = val, off
						}
					}
				}
				if !nan {
					grad[at] += v[(b*oh+i)*ow+j]
				}
			}
		}
	}
	return grad
}

// TestMaxPoolGradientTiesAndNaN: where a window's maximum is not unique
// (ReLU's zeros, saturated values), its whole gradient goes to the first
// maximum in row-major order, as torch's; a window holding NaN pools to
// NaN (XLA's CPU reduce-window alone would skip it). Finite differences
// cannot see this; the host rules can. Each pool runs NCHW and
// channels-last (after a 1x1 identity convolution).
func TestMaxPoolGradientTiesAndNaN(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	nan := float32(math.NaN())
	x := []float32{
		0, 0, 1, 1, 2, 5,
		0, 0, 1, 1, 5, 2,
		3, 3, nan, 0, 7, 7,
		3, 2, 0, nan, 7, 7,
		4, 4, 4, 4, 4, 4,
	}
	dims := []int{1, 1, 5, 6}
	for _, pool := range [][3]int{{2, 2, 0}, {3, 3, 0}, {3, 2, 1}, {2, 1, 0}} {
		for _, channelsLast := range []bool{false, true} {
			k, s, p := pool[0], pool[1], pool[2]
			in := mustFromSlice(t, d, x, dims...)
			require.NoError(t, in.SetRequiresGrad(true))
			pooled := in
			if channelsLast {
				pooled = Conv2d(in, d.Full(1, Float32, 1, 1, 1, 1), Conv2dOptions{})
			}
			y := maxPool(pooled, k, s, p)
			n := 1
			for _, dim := range y.Dims() {
				n *= dim
			}
			v := make([]float32, n)
			v64 := make([]float64, len(v))
			for i := range v {
				v[i], v64[i] = float32(i+1), float64(i+1)
			}
			require.NoError(t, y.Mul(mustFromSlice(t, d, v, y.Dims()...)).Sum().Backward())
			got, err := in.Grad().Float32s(ctx)
			require.NoError(t, err)
			host := reference.New(dims...)
			for i, val := range x {
				host.V[i] = float64(val)
			}
			pooled32, err := y.Float32s(ctx)
			require.NoError(t, err)
			wantPooled := hostMaxPoolNaN(host, k, s, p)
			for i, want := range wantPooled.V {
				if math.IsNaN(want) {
					assert.True(t, math.IsNaN(float64(pooled32[i])), "kernel %d stride %d padding %d channels-last %v: pooled[%d] = %g, want NaN", k, s, p, channelsLast, i, pooled32[i])
				} else {
					assert.Equal(t, want, float64(pooled32[i]), "kernel %d stride %d padding %d channels-last %v: pooled[%d]", k, s, p, channelsLast, i)
				}
			}
			want := firstMaxGrad(host, v64, k, s, p)
			for i := range want {
				assert.Equal(t, want[i], float64(got[i]), "kernel %d stride %d padding %d channels-last %v: gradient[%d]", k, s, p, channelsLast, i)
			}
		}
	}
}

// hostMaxPoolNaN is torch's max-pool forward: NaN wins its window.
func hostMaxPoolNaN(x reference.Tensor, k, s, p int) reference.Tensor {
	marked := x.Map(func(v float64) float64 {
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		return v
	})
	out := hostMaxPool(marked, k, s, p)
	withInf := hostMaxPool(x.Map(func(v float64) float64 {
		if math.IsNaN(v) {
			return math.Inf(-1)
		}
		return v
	}), k, s, p)
	for i := range out.V {
		if math.IsInf(out.V[i], 1) && !math.IsInf(withInf.V[i], 1) {
			out.V[i] = math.NaN()
		}
	}
	return out
}
