package xla

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla/internal/reference"
)

// opCase is one op under test: the device program and an independent
// float64 host program over the same random float32 inputs.
type opCase struct {
	name     string
	inputs   [][]int // dims of each float input
	positive bool    // inputs in [0.5, 2) instead of N(0, 1)
	device   func(d *Device, xs []*Tensor) *Tensor
	host     func(xs []reference.Tensor) reference.Tensor
}

// Tolerances: forward 1e-5 absolute + 1e-5 relative (float32 arithmetic);
// gradients 2e-4 absolute + 1e-3 relative against float64 central
// differences with step 1e-6.
const (
	fwdAbs, fwdRel   = 1e-5, 1e-5
	gradAbs, gradRel = 2e-4, 1e-3
	fdStep           = 1e-6
)

func opCases() []opCase {
	unary := func(name string, pos bool, dev func(*Tensor) *Tensor, f func(float64) float64) opCase {
		return opCase{name: name, inputs: [][]int{{3, 4}}, positive: pos,
			device: func(_ *Device, x []*Tensor) *Tensor { return dev(x[0]) },
			host:   func(x []reference.Tensor) reference.Tensor { return x[0].Map(f) }}
	}
	binary := func(name string, a, b []int, pos bool, dev func(x, y *Tensor) *Tensor, f func(x, y float64) float64) opCase {
		return opCase{name: name, inputs: [][]int{a, b}, positive: pos,
			device: func(_ *Device, x []*Tensor) *Tensor { return dev(x[0], x[1]) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.ZipWith(x[0], x[1], f) }}
	}
	labels := []int{2, 0, 3}
	return []opCase{
		binary("Add broadcast", []int{3, 4}, []int{4}, false, (*Tensor).Add, func(x, y float64) float64 { return x + y }),
		binary("Sub broadcast", []int{3, 1}, []int{1, 4}, false, (*Tensor).Sub, func(x, y float64) float64 { return x - y }),
		binary("Mul", []int{2, 3}, []int{2, 3}, false, (*Tensor).Mul, func(x, y float64) float64 { return x * y }),
		binary("Div", []int{2, 3}, []int{3}, true, (*Tensor).Div, func(x, y float64) float64 { return x / y }),
		binary("Pow", []int{2, 3}, []int{2, 3}, true, (*Tensor).Pow, math.Pow),
		binary("Maximum", []int{2, 3}, []int{2, 3}, false, (*Tensor).Maximum, math.Max),
		binary("Minimum", []int{2, 3}, []int{2, 3}, false, (*Tensor).Minimum, math.Min),
		unary("Neg", false, (*Tensor).Neg, func(x float64) float64 { return -x }),
		unary("Abs", false, (*Tensor).Abs, math.Abs),
		unary("Exp", false, (*Tensor).Exp, math.Exp),
		unary("Log", true, (*Tensor).Log, math.Log),
		unary("Sqrt", true, (*Tensor).Sqrt, math.Sqrt),
		unary("Tanh", false, (*Tensor).Tanh, math.Tanh),
		unary("Erf", false, (*Tensor).Erf, math.Erf),
		unary("Sigmoid", false, (*Tensor).Sigmoid, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }),
		unary("Relu", false, (*Tensor).Relu, func(x float64) float64 { return math.Max(x, 0) }),
		unary("Square", false, (*Tensor).Square, func(x float64) float64 { return x * x }),
		unary("AddScalar", false, func(x *Tensor) *Tensor { return x.AddScalar(2.5) }, func(x float64) float64 { return x + 2.5 }),
		unary("MulScalar", false, func(x *Tensor) *Tensor { return x.MulScalar(-0.75) }, func(x float64) float64 { return -0.75 * x }),
		unary("PowScalar", true, func(x *Tensor) *Tensor { return x.PowScalar(3) }, func(x float64) float64 { return x * x * x }),
		{name: "Where", inputs: [][]int{{3, 4}, {3, 4}},
			device: func(d *Device, x []*Tensor) *Tensor {
				return Where(x[0].Greater(x[1]), x[0].Square(), x[1].MulScalar(3))
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.ZipWith(x[0], x[1], func(a, b float64) float64 {
					if a > b {
						return a * a
					}
					return 3 * b
				})
			}},
		{name: "MatMul", inputs: [][]int{{3, 4}, {4, 5}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].MatMul(x[1]) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.MatMul(x[0], x[1]) }},
		{name: "MatMul rank3 x matrix", inputs: [][]int{{2, 3, 4}, {4, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].MatMul(x[1]) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.MatMul(x[0], x[1]) }},
		{name: "MatMul batched", inputs: [][]int{{2, 3, 4}, {2, 4, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].MatMul(x[1]) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.MatMul(x[0], x[1]) }},
		{name: "Sum all", inputs: [][]int{{3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Sum() },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Reduce(x[0], []int{0, 1}, 0, func(a, b float64) float64 { return a + b })
			}},
		{name: "Sum axes 0,2", inputs: [][]int{{2, 3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Sum(0, -1) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Reduce(x[0], []int{0, 2}, 0, func(a, b float64) float64 { return a + b })
			}},
		{name: "Mean axis 1", inputs: [][]int{{3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Mean(1) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Reduce(x[0], []int{1}, 0, func(a, b float64) float64 { return a + b }).Map(func(v float64) float64 { return v / 4 })
			}},
		{name: "Max axis 0", inputs: [][]int{{3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Max(0) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Reduce(x[0], []int{0}, math.Inf(-1), math.Max)
			}},
		{name: "Min axis 1", inputs: [][]int{{3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Min(1) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Reduce(x[0], []int{1}, math.Inf(1), math.Min)
			}},
		{name: "Reshape", inputs: [][]int{{2, 6}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Reshape(3, -1).MulScalar(2) },
			host: func(x []reference.Tensor) reference.Tensor {
				h := x[0].Map(func(v float64) float64 { return 2 * v })
				h.Dims = []int{3, 4}
				return h
			}},
		{name: "Permute", inputs: [][]int{{2, 3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Permute(2, 0, 1) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Permute(x[0], []int{2, 0, 1}) }},
		{name: "BroadcastTo", inputs: [][]int{{3, 1}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].BroadcastTo(2, 3, 4) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.ZipWith(x[0], reference.New(2, 3, 4), func(a, _ float64) float64 { return a })
			}},
		{name: "Concat", inputs: [][]int{{2, 3}, {2, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor { return Concat(1, x[0], x[1]) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Concat(1, x[0], x[1]) }},
		{name: "Concat middle operand", inputs: [][]int{{2, 1, 3}, {2, 2, 3}, {2, 2, 3}},
			device: func(_ *Device, x []*Tensor) *Tensor { return Concat(1, x[0], x[1], x[2]) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Concat(1, x[0], x[1], x[2]) }},
		{name: "Narrow", inputs: [][]int{{4, 5}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Narrow(1, 1, 3) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Narrow(x[0], 1, 1, 3) }},
		{name: "Softmax", inputs: [][]int{{3, 5}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Softmax(-1) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Softmax(x[0], 1, false) }},
		{name: "LogSoftmax axis 0", inputs: [][]int{{4, 3}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].LogSoftmax(0) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Softmax(x[0], 0, true) }},
		{name: "TakeAlongAxis labels", inputs: [][]int{{3, 5}},
			device: func(d *Device, x []*Tensor) *Tensor {
				idx, err := FromSlice(d, []int32{2, 0, 3}, 3, 1)
				if err != nil {
					return d.failed(x[0].shape, err)
				}
				return x[0].TakeAlongAxis(idx, 1)
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.TakeAlongAxis(x[0], labels, []int{3, 1}, 1)
			}},
		{name: "Conv2d", inputs: [][]int{{2, 3, 5, 5}, {4, 3, 3, 3}},
			device: func(_ *Device, x []*Tensor) *Tensor { return Conv2d(x[0], x[1], Conv2dOptions{}) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x[0], x[1], convParams(Conv2dOptions{}))
			}},
		{name: "Conv2d stride padding", inputs: [][]int{{1, 2, 6, 5}, {3, 2, 3, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return Conv2d(x[0], x[1], Conv2dOptions{Stride: [2]int{2, 1}, Padding: [2]int{1, 2}})
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x[0], x[1], convParams(Conv2dOptions{Stride: [2]int{2, 1}, Padding: [2]int{1, 2}}))
			}},
		{name: "Conv2d groups dilation", inputs: [][]int{{1, 4, 6, 6}, {4, 2, 2, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return Conv2d(x[0], x[1], Conv2dOptions{Groups: 2, Dilation: [2]int{2, 2}, Padding: [2]int{1, 1}})
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x[0], x[1], convParams(Conv2dOptions{Groups: 2, Dilation: [2]int{2, 2}, Padding: [2]int{1, 1}}))
			}},
		// Regressions for the two GoMLX convolution-gradient bugs opConv2d avoids.
		{name: "Conv2d even kernel", inputs: [][]int{{1, 2, 3, 9}, {2, 2, 2, 2}},
			device: func(_ *Device, x []*Tensor) *Tensor { return Conv2d(x[0], x[1], Conv2dOptions{}) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x[0], x[1], convParams(Conv2dOptions{}))
			}},
		{name: "Conv2d even kernel dilation stride", inputs: [][]int{{1, 1, 7, 8}, {2, 1, 2, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return Conv2d(x[0], x[1], Conv2dOptions{Stride: [2]int{2, 1}, Dilation: [2]int{2, 1}, Padding: [2]int{1, 1}})
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x[0], x[1], convParams(Conv2dOptions{Stride: [2]int{2, 1}, Dilation: [2]int{2, 1}, Padding: [2]int{1, 1}}))
			}},
		{name: "Conv2d padding beyond kernel", inputs: [][]int{{1, 1, 4, 4}, {1, 1, 1, 3}},
			device: func(_ *Device, x []*Tensor) *Tensor { return Conv2d(x[0], x[1], Conv2dOptions{Padding: [2]int{2, 3}}) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Conv2d(x[0], x[1], convParams(Conv2dOptions{Padding: [2]int{2, 3}}))
			}},
		{name: "MaxPool2d k3 s2 p1", inputs: [][]int{{1, 2, 6, 6}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return MaxPool2d(x[0], Pool2dOptions{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}})
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Pool2d(x[0], poolParams(Pool2dOptions{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}), true)
			}},
		{name: "AvgPool2d k2", inputs: [][]int{{2, 2, 4, 6}},
			device: func(_ *Device, x []*Tensor) *Tensor { return AvgPool2d(x[0], Pool2dOptions{Kernel: [2]int{2, 2}}) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Pool2d(x[0], poolParams(Pool2dOptions{Kernel: [2]int{2, 2}}), false)
			}},
		{name: "AvgPool2d k3 s1 p1", inputs: [][]int{{1, 1, 4, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor {
				return AvgPool2d(x[0], Pool2dOptions{Kernel: [2]int{3, 3}, Stride: [2]int{1, 1}, Padding: [2]int{1, 1}})
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.Pool2d(x[0], poolParams(Pool2dOptions{Kernel: [2]int{3, 3}, Stride: [2]int{1, 1}, Padding: [2]int{1, 1}}), false)
			}},
	}
}

// TestOpsAgainstFloat64Reference checks every op's forward values and its
// gradient (of loss = Σ op(x)·R for a random R) against the host reference.
func TestOpsAgainstFloat64Reference(t *testing.T) {
	for ci, tc := range opCases() {
		t.Run(tc.name, func(t *testing.T) { runOpCase(t, tc, ci) })
	}
}

// runOpCase checks one op case on a 1-device engine; seed picks its inputs.
func runOpCase(t *testing.T, tc opCase, seed int) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	{
		{
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			xsHost := make([]reference.Tensor, len(tc.inputs))
			xs := make([]*Tensor, len(tc.inputs))
			for i, dims := range tc.inputs {
				h := reference.New(dims...)
				f32 := make([]float32, len(h.V))
				for j := range f32 {
					if tc.positive {
						f32[j] = float32(0.5 + 1.5*rng.Float64())
					} else {
						f32[j] = float32(rng.NormFloat64())
					}
					h.V[j] = float64(f32[j])
				}
				xsHost[i] = h
				xs[i] = mustFromSlice(t, d, f32, dims...)
				require.NoError(t, xs[i].SetRequiresGrad(true))
			}
			want := tc.host(xsHost)
			y := tc.device(d, xs)
			require.NoError(t, y.Err())
			require.Equal(t, want.Dims, y.Dims(), "output shape")
			weights := reference.New(want.Dims...)
			w32 := make([]float32, len(weights.V))
			for j := range w32 {
				w32[j] = float32(rng.NormFloat64())
				weights.V[j] = float64(w32[j])
			}
			r := mustFromSlice(t, d, w32, want.Dims...)
			require.NoError(t, y.Mul(r).Sum().Backward())

			got, err := y.Float32s(ctx)
			require.NoError(t, err)
			for j := range want.V {
				assert.InDelta(t, want.V[j], float64(got[j]), fwdAbs+fwdRel*math.Abs(want.V[j]), "forward[%d]", j)
			}
			loss := func(in []reference.Tensor) float64 {
				out := tc.host(in)
				var s float64
				for j := range out.V {
					s += out.V[j] * weights.V[j]
				}
				return s
			}
			for i := range xs {
				require.NotNil(t, xs[i].Grad(), "input %d has a gradient", i)
				grad, err := xs[i].Grad().Float32s(ctx)
				require.NoError(t, err)
				for j := range xsHost[i].V {
					plus, minus := cloneHosts(xsHost), cloneHosts(xsHost)
					plus[i].V[j] += fdStep
					minus[i].V[j] -= fdStep
					fd := (loss(plus) - loss(minus)) / (2 * fdStep)
					assert.InDelta(t, fd, float64(grad[j]), gradAbs+gradRel*math.Abs(fd), "d/d input %d [%d]", i, j)
				}
			}
		}
	}
}

func cloneHosts(hs []reference.Tensor) []reference.Tensor {
	out := make([]reference.Tensor, len(hs))
	for i, h := range hs {
		out[i] = reference.Tensor{Dims: h.Dims, V: slices.Clone(h.V)}
	}
	return out
}

func convParams(o Conv2dOptions) reference.ConvParams {
	o = o.normalized()
	return reference.ConvParams{Stride: o.Stride, Padding: o.Padding, Dilation: o.Dilation, Groups: o.Groups}
}

func poolParams(o Pool2dOptions) reference.PoolParams {
	return reference.PoolParams{Kernel: o.Kernel, Stride: o.Stride, Padding: o.Padding}
}
