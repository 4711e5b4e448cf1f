package xla

import (
	"slices"

	"github.com/gomlx/gomlx/core/graph"
)

var (
	opReshape = &opDef{name: "reshape", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.Reshape(in[0], n.shape.Dimensions...)
	}}
	opTranspose = &opDef{name: "transpose", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.TransposeAllDims(in[0], n.attrs.ints...)
	}}
	opBroadcast = &opDef{name: "broadcast", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return broadcastTo(in[0], n.shape.Dimensions)
	}}
	opConcat = &opDef{name: "concat", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.Concatenate(in, n.attrs.ints[0])
	}}
	opNarrow = &opDef{name: "narrow", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		axis, start, length := n.attrs.ints[0], n.attrs.ints[1], n.attrs.ints[2]
		return graph.SliceAxis(in[0], axis, graph.AxisRange(start, start+length))
	}}
)

// Reshape returns t with new dimensions of the same total size; one
// dimension may be -1 and is inferred.
func (t *Tensor) Reshape(dims ...int) *Tensor {
	const op = "Reshape"
	if bad := precheck(op, t); bad != nil {
		return bad
	}
	out := slices.Clone(dims)
	infer := -1
	var given []int
	for i, d := range out {
		switch {
		case d == -1 && infer == -1:
			infer = i
		case d == -1:
			return t.dev.failed(t.shape, opError(op, "more than one -1 in %v", dims))
		case d < 0:
			return t.dev.failed(t.shape, opError(op, "negative dimension in %v", dims))
		default:
			given = append(given, d)
		}
	}
	known, ok := numElements(given)
	if !ok {
		return t.dev.failed(t.shape, opError(op, "%v has more elements than any tensor (MaxTensorBytes)", dims))
	}
	size := t.shape.Size()
	if infer >= 0 {
		if known == 0 || size%known != 0 {
			return t.dev.failed(t.shape, opError(op, "cannot infer -1 in %v for %s (size %d)", dims, t.shape, size))
		}
		out[infer] = size / known
		known *= out[infer]
	}
	if known != size {
		return t.dev.failed(t.shape, opError(op, "%v has %d elements but %s has %d", dims, known, t.shape, size))
	}
	return record(opReshape, attrs{}, shapeOf(t.DType(), out...), t)
}

// Flatten keeps the first dimension and merges the rest (torch's flatten(1)).
func (t *Tensor) Flatten() *Tensor {
	if t.Rank() < 1 {
		return t.Reshape(1, 1)
	}
	// The product, not -1: an empty batch [0, C, H, W] flattens to
	// [0, C·H·W] as in torch, where -1 could be anything.
	rest, _ := numElements(t.Dims()[1:])
	return t.Reshape(t.Dims()[0], rest)
}

// Unsqueeze inserts a dimension of size 1 at axis.
func (t *Tensor) Unsqueeze(axis int) *Tensor {
	ax, err := normalizeAxis("Unsqueeze", axis, t.Rank()+1)
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	return t.Reshape(slices.Insert(slices.Clone(t.Dims()), ax, 1)...)
}

// Permute reorders the axes: output axis i is input axis perm[i].
func (t *Tensor) Permute(perm ...int) *Tensor {
	const op = "Permute"
	if bad := precheck(op, t); bad != nil {
		return bad
	}
	if len(perm) != t.Rank() {
		return t.dev.failed(t.shape, opError(op, "permutation %v for rank %d", perm, t.Rank()))
	}
	dims := make([]int, len(perm))
	seen := make([]bool, len(perm))
	for i, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			return t.dev.failed(t.shape, opError(op, "%v is not a permutation of 0..%d", perm, len(perm)-1))
		}
		seen[p] = true
		dims[i] = t.Dims()[p]
	}
	return record(opTranspose, attrs{ints: slices.Clone(perm)}, shapeOf(t.DType(), dims...), t)
}

// T transposes a matrix (rank 2).
func (t *Tensor) T() *Tensor {
	if t.Rank() != 2 && t.err == nil {
		return t.dev.failed(t.shape, opError("T", "needs a matrix, got %s (use Permute)", t.shape))
	}
	return t.Permute(1, 0)
}

// BroadcastTo expands t to dims with NumPy broadcasting rules.
func (t *Tensor) BroadcastTo(dims ...int) *Tensor {
	const op = "BroadcastTo"
	if bad := precheck(op, t); bad != nil {
		return bad
	}
	target, err := checkDims(op, t.DType(), dims)
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	got, err := broadcastShapes(op, t.shape, target)
	if err != nil || !got.Equal(target) {
		return t.dev.failed(t.shape, opError(op, "%s cannot broadcast to %v", t.shape, dims))
	}
	return record(opBroadcast, attrs{}, target, t)
}

// Concat joins tensors along axis; other dimensions and dtypes must match.
func Concat(axis int, ts ...*Tensor) *Tensor {
	const op = "Concat"
	if len(ts) == 0 {
		panic("xla: Concat needs at least one tensor")
	}
	if bad := precheck(op, ts...); bad != nil {
		return bad
	}
	first := ts[0]
	ax, err := normalizeAxis(op, axis, first.Rank())
	if err != nil {
		return first.dev.failed(first.shape, err)
	}
	dims := slices.Clone(first.Dims())
	for _, x := range ts[1:] {
		if x.DType() != first.DType() || x.Rank() != first.Rank() {
			return first.dev.failed(first.shape, opError(op, "%s and %s differ in dtype or rank", first.shape, x.shape))
		}
		for i, d := range x.Dims() {
			if i != ax && d != dims[i] {
				return first.dev.failed(first.shape, opError(op, "%s and %s differ outside axis %d", first.shape, x.shape, ax))
			}
		}
		dims[ax] += x.Dims()[ax]
	}
	return record(opConcat, attrs{ints: []int{ax}}, shapeOf(first.DType(), dims...), ts...)
}

// Narrow returns length elements starting at start along axis (torch.narrow).
func (t *Tensor) Narrow(axis, start, length int) *Tensor {
	const op = "Narrow"
	if bad := precheck(op, t); bad != nil {
		return bad
	}
	ax, err := normalizeAxis(op, axis, t.Rank())
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	if start < 0 || length < 0 || start > t.Dims()[ax] || length > t.Dims()[ax]-start {
		return t.dev.failed(t.shape, opError(op, "[%d, %d) out of range for axis %d of %s", start, start+length, ax, t.shape))
	}
	dims := slices.Clone(t.Dims())
	dims[ax] = length
	return record(opNarrow, attrs{ints: []int{ax, start, length}}, shapeOf(t.DType(), dims...), t)
}
