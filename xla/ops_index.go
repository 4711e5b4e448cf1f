package xla

import (
	"math"
	"slices"

	"github.com/gomlx/gomlx/core/graph"
)

var (
	// opIndexSelect gathers whole slices along attrs.ints[0]; its gradient
	// is GoMLX's scatter-add of the output gradient into those slices.
	opIndexSelect = &opDef{name: "index_select", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		x, idx := in[0], in[1]
		axis := n.attrs.ints[0]
		if axis != 0 {
			x = graph.Transpose(x, 0, axis)
		}
		out := graph.Gather(x, graph.Reshape(idx, idx.Shape().Size(), 1))
		if axis != 0 {
			out = graph.Transpose(out, 0, axis)
		}
		return out
	}}
	// opTril keeps x[..., i, j] where j-i <= attrs.ints[0], else 0.
	opTril = &opDef{name: "tril", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		x := in[0]
		r := x.Rank()
		dims := x.Shape().Dimensions
		g := x.Graph()
		rows := graph.Iota(g, shapeOf(Int32, dims[r-2], dims[r-1]), 0)
		cols := graph.Iota(g, shapeOf(Int32, dims[r-2], dims[r-1]), 1)
		keep := graph.LessOrEqual(graph.Sub(cols, rows), graph.Scalar(g, Int32, n.attrs.ints[0]))
		return graph.Where(broadcastTo(keep, dims), x, graph.ZerosLike(x))
	}}
)

// IndexSelect returns the slices of t at the 1-D integer indices along
// axis, as torch.index_select: the output has t's shape with axis
// resized to len(indices). Embedding lookups are IndexSelect(0, ids).
// Indices are not checked on the host (that would read the device): an
// index outside [0, size) is clamped into range, as XLA's gather does
// (JAX's default too), where torch raises.
func (t *Tensor) IndexSelect(axis int, indices *Tensor) *Tensor {
	const op = "IndexSelect"
	if bad := precheck(op, t, indices); bad != nil {
		return bad
	}
	if indices.DType() != Int32 && indices.DType() != Int64 {
		return t.dev.failed(t.shape, opError(op, "indices are %s, want Int32 or Int64", indices.shape))
	}
	if indices.Rank() != 1 {
		return t.dev.failed(t.shape, opError(op, "indices %s must be 1-D (flatten them, then reshape the result)", indices.shape))
	}
	ax, err := normalizeAxis(op, axis, t.Rank())
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	if t.Dims()[ax] == 0 && indices.Dims()[0] > 0 {
		return t.dev.failed(t.shape, opError(op, "cannot select from axis %d of %s: it is empty", ax, t.shape))
	}
	dims := slices.Clone(t.Dims())
	dims[ax] = indices.Dims()[0]
	return record(opIndexSelect, attrs{ints: []int{ax}}, shapeOf(t.DType(), dims...), t, indices)
}

// Tril keeps the lower triangle of the last two axes, torch.tril: the
// elements with column - row <= diagonal; the others become 0.
func (t *Tensor) Tril(diagonal int) *Tensor {
	const op = "Tril"
	if bad := precheck(op, t); bad != nil {
		return bad
	}
	if t.Rank() < 2 {
		return t.dev.failed(t.shape, opError(op, "needs rank >= 2, got %s", t.shape))
	}
	dims := t.Dims()
	diagonal = max(min(diagonal, dims[t.Rank()-1]), -dims[t.Rank()-2]) // beyond the matrix, all or none stay
	return record(opTril, attrs{ints: []int{diagonal}}, t.shape, t)
}

// MaskedFill returns t with value wherever mask (Bool, broadcast to t)
// holds, torch's masked_fill.
func (t *Tensor) MaskedFill(mask *Tensor, value float64) *Tensor {
	const op = "MaskedFill"
	if bad := precheck(op, t, mask); bad != nil {
		return bad
	}
	return Where(mask, t.dev.Full(value, t.DType()), t).BroadcastTo(t.Dims()...)
}

// MaskedSoftmax is Softmax along axis over the entries where keep (Bool,
// broadcast to t) holds; the others get probability 0 and no gradient.
// A row with no kept entry is NaN, as torch's softmax of a row of -inf.
func (t *Tensor) MaskedSoftmax(keep *Tensor, axis int) *Tensor {
	const op = "MaskedSoftmax"
	if bad := precheck(op, t, keep); bad != nil {
		return bad
	}
	if keep.DType() != Bool {
		return t.dev.failed(t.shape, opError(op, "the mask is %s, want Bool", keep.shape))
	}
	return Where(keep, t, t.dev.Full(math.Inf(-1), t.DType())).BroadcastTo(t.Dims()...).Softmax(axis)
}
