package xla

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

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
