package xla

import (
	"slices"

	"github.com/gomlx/gomlx/core/graph"
)

// opMatMul contracts the last axis of a with axis -2 of b, batching over
// a's leading axes when b has the same batch dims (attrs.ints[0] = batch rank).
var opMatMul = &opDef{name: "matmul", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	a, b := in[0], in[1]
	batch := n.attrs.ints[0]
	if batch == 0 {
		// [..., k] x [k, n]: fold the leading axes into the row axis. As
		// one [rows, k] x [k, n] dot: the weight gradient of a rank-3
		// operand's dot contracts two axes, which XLA's CPU backend runs
		// far slower than the same dot on the reshaped matrix (a GPT step,
		// one core: 228 → 110 ms). Batch axes stay as they are: merging
		// them costs a copy of the permuted operands (157 ms).
		if a.Rank() > 2 {
			k := a.Shape().Dimensions[a.Rank()-1]
			flat := rc.dotGeneral(graph.Reshape(a, -1, k), []int{1}, nil, b, []int{0}, nil)
			return graph.Reshape(flat, n.shape.Dimensions...)
		}
		return rc.dotGeneral(a, []int{a.Rank() - 1}, nil, b, []int{0}, nil)
	}
	axes := make([]int, batch)
	for i := range axes {
		axes[i] = i
	}
	return rc.dotGeneral(a, []int{a.Rank() - 1}, axes, b, []int{b.Rank() - 2}, axes)
}}

// MatMul returns the matrix product. Supported: [..., m, k] x [k, n] (the
// leading axes of t are kept, as in a Linear layer), and batched
// [B..., m, k] x [B..., k, n] with equal batch dims.
func (t *Tensor) MatMul(o *Tensor) *Tensor {
	const op = "MatMul"
	if bad := precheck(op, t, o); bad != nil {
		return bad
	}
	a, b := t.shape, o.shape
	switch {
	case a.DType != b.DType:
		return t.dev.failed(a, opError(op, "dtypes differ: %s x %s (convert one with Cast)", a, b))
	case a.Rank() < 1 || b.Rank() < 2:
		return t.dev.failed(a, opError(op, "needs rank >= 1 x rank >= 2, got %s x %s", a, b))
	case a.Dimensions[a.Rank()-1] != b.Dimensions[b.Rank()-2]:
		return t.dev.failed(a, opError(op, "%s x %s: contracting dimensions differ (%d vs %d)",
			a, b, a.Dimensions[a.Rank()-1], b.Dimensions[b.Rank()-2]))
	}
	if b.Rank() == 2 {
		dims := append(slices.Clone(a.Dimensions[:a.Rank()-1]), b.Dimensions[1])
		return record(opMatMul, attrs{ints: []int{0}}, shapeOf(a.DType, dims...), t, o)
	}
	batch := b.Rank() - 2
	if a.Rank() != b.Rank() || !slices.Equal(a.Dimensions[:batch], b.Dimensions[:batch]) {
		return t.dev.failed(a, opError(op, "%s x %s: batched matmul needs equal batch dimensions", a, b))
	}
	dims := append(slices.Clone(a.Dimensions[:a.Rank()-1]), b.Dimensions[b.Rank()-1])
	return record(opMatMul, attrs{ints: []int{batch}}, shapeOf(a.DType, dims...), t, o)
}
