package xla

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla/internal/reference"
)

// dotCase is a dot_general with arbitrary axes, replayed through
// replayContext.dotGeneral so its gradient is dotGeneralGrad.
type dotCase struct {
	name     string
	lhs, rhs []int
	ax       dotAxes
}

// TestDotGeneralGradientAnyAxes checks dotGeneralGrad, against float64
// central differences, for axis layouts MatMul never builds: contracting
// axes first, batch axes in the middle or last, several contracting axes
// given out of order, and no free axis on one side.
func TestDotGeneralGradientAnyAxes(t *testing.T) {
	cases := []dotCase{
		{"contract lhs axis 0", []int{4, 3}, []int{4, 5}, dotAxes{lhsContract: []int{0}, rhsContract: []int{0}}},
		{"transposed rhs", []int{3, 4}, []int{5, 4}, dotAxes{lhsContract: []int{1}, rhsContract: []int{1}}},
		{"batch in the middle", []int{3, 2, 4}, []int{4, 2, 5}, dotAxes{lhsContract: []int{2}, lhsBatch: []int{1}, rhsContract: []int{0}, rhsBatch: []int{1}}},
		{"two contracting axes out of order", []int{2, 3, 4}, []int{4, 5, 2}, dotAxes{lhsContract: []int{2, 0}, rhsContract: []int{0, 2}}},
		{"batch last, two batch axes", []int{3, 4, 2, 2}, []int{4, 5, 2, 2}, dotAxes{lhsContract: []int{1}, lhsBatch: []int{3, 2}, rhsContract: []int{0}, rhsBatch: []int{3, 2}}},
		{"inner product", []int{6}, []int{6}, dotAxes{lhsContract: []int{0}, rhsContract: []int{0}}},
		{"outer product", []int{3}, []int{2}, dotAxes{}},
	}
	for i, dc := range cases {
		t.Run(dc.name, func(t *testing.T) {
			op := &opDef{name: "test_dot", replay: func(rc *replayContext, _ *node, in []*graph.Node) *graph.Node {
				return rc.dotGeneral(in[0], dc.ax.lhsContract, dc.ax.lhsBatch, in[1], dc.ax.rhsContract, dc.ax.rhsBatch)
			}}
			outDims := dotOutputDims(dc)
			runOpCase(t, opCase{
				name:   dc.name,
				inputs: [][]int{dc.lhs, dc.rhs},
				device: func(_ *Device, x []*Tensor) *Tensor {
					return record(op, attrs{}, shapeOf(Float32, outDims...), x[0], x[1])
				},
				host: func(x []reference.Tensor) reference.Tensor { return referenceDotGeneral(x[0], x[1], dc, outDims) },
			}, 100+i)
		})
	}
}

func dotOutputDims(dc dotCase) []int {
	var dims []int
	for _, a := range dc.ax.lhsBatch {
		dims = append(dims, dc.lhs[a])
	}
	for _, a := range freeAxes(len(dc.lhs), dc.ax.lhsContract, dc.ax.lhsBatch) {
		dims = append(dims, dc.lhs[a])
	}
	for _, a := range freeAxes(len(dc.rhs), dc.ax.rhsContract, dc.ax.rhsBatch) {
		dims = append(dims, dc.rhs[a])
	}
	return dims
}

// referenceDotGeneral is dot_general in float64, by definition: for each
// output index, the sum over every contracting index.
func referenceDotGeneral(a, b reference.Tensor, dc dotCase, outDims []int) reference.Tensor {
	out := reference.New(outDims...)
	lhsFree := freeAxes(len(dc.lhs), dc.ax.lhsContract, dc.ax.lhsBatch)
	rhsFree := freeAxes(len(dc.rhs), dc.ax.rhsContract, dc.ax.rhsBatch)
	contractDims := make([]int, len(dc.ax.lhsContract))
	for k, ax := range dc.ax.lhsContract {
		contractDims[k] = dc.lhs[ax]
	}
	numContract := 1
	for _, d := range contractDims {
		numContract *= d
	}
	for o := range out.V {
		idx := reference.Unravel(o, outDims)
		ai, bi := make([]int, len(dc.lhs)), make([]int, len(dc.rhs))
		nb := len(dc.ax.lhsBatch)
		for i := range nb {
			ai[dc.ax.lhsBatch[i]], bi[dc.ax.rhsBatch[i]] = idx[i], idx[i]
		}
		for j, ax := range lhsFree {
			ai[ax] = idx[nb+j]
		}
		for j, ax := range rhsFree {
			bi[ax] = idx[nb+len(lhsFree)+j]
		}
		var sum float64
		for c := range numContract {
			cidx := reference.Unravel(c, contractDims)
			for k := range cidx {
				ai[dc.ax.lhsContract[k]], bi[dc.ax.rhsContract[k]] = cidx[k], cidx[k]
			}
			sum += a.V[reference.Ravel(ai, dc.lhs)] * b.V[reference.Ravel(bi, dc.rhs)]
		}
		out.V[o] = sum
	}
	return out
}

// TestBFloat16MatMulAccumulatesInFloat32: a bf16 matmul (and its batched
// form) equals the float64 product of its bf16 operands rounded once to
// bf16, as bf16 hardware computes it (float32 accumulation), and its
// gradients are bf16 too.
func TestBFloat16MatMulAccumulatesInFloat32(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const m, k, n = 3, 300, 2
	av, bv := make([]bfloat16.BFloat16, 2*m*k), make([]bfloat16.BFloat16, 2*k*n)
	for i := range av {
		av[i] = bfloat16.FromFloat64(rng.NormFloat64())
	}
	for i := range bv {
		bv[i] = bfloat16.FromFloat64(rng.NormFloat64())
	}
	a, err := FromSlice(d, av, 2, m, k)
	require.NoError(t, err)
	b, err := FromSlice(d, bv, 2, k, n)
	require.NoError(t, err)
	require.NoError(t, a.SetRequiresGrad(true))
	y := a.MatMul(b)
	require.Equal(t, BFloat16, y.DType())
	require.NoError(t, y.Cast(Float32).Sum().Backward())
	got, err := Values[bfloat16.BFloat16](ctx, y)
	require.NoError(t, err)
	for bi := range 2 {
		for i := range m {
			for j := range n {
				var exact float64
				for p := range k {
					exact += float64(av[(bi*m+i)*k+p].Float32()) * float64(bv[(bi*k+p)*n+j].Float32())
				}
				want := float64(bfloat16.FromFloat64(exact).Float32())
				assert.InDelta(t, want, float64(got[(bi*m+i)*n+j].Float32()), math.Abs(want)/128, "[%d,%d,%d] one bf16 rounding of %g", bi, i, j, exact)
			}
		}
	}
	assert.Equal(t, BFloat16, a.Grad().DType())
}
