package xla

import (
	"slices"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

var (
	opSum = &opDef{name: "sum", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.ReduceSum(in[0], n.attrs.ints...)
	}}
	opMean = &opDef{name: "mean", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.ReduceMean(in[0], n.attrs.ints...)
	}}
	opMax = &opDef{name: "max", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.ReduceMax(in[0], n.attrs.ints...)
	}}
	opMin = &opDef{name: "min", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.ReduceMin(in[0], n.attrs.ints...)
	}}
	opArgMax = &opDef{name: "argmax", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.ArgMax(in[0], n.attrs.ints[0], Int32)
	}}
)

// reduceAxes validates axes (none means all) and returns them sorted and
// the reduced shape.
func reduceAxes(op string, s shapes.Shape, axes []int) ([]int, shapes.Shape, error) {
	if len(axes) == 0 {
		axes = make([]int, s.Rank())
		for i := range axes {
			axes[i] = i
		}
	}
	norm := make([]int, 0, len(axes))
	for _, a := range axes {
		ax, err := normalizeAxis(op, a, s.Rank())
		if err != nil {
			return nil, shapes.Shape{}, err
		}
		if slices.Contains(norm, ax) {
			return nil, shapes.Shape{}, opError(op, "axis %d given twice for %s", a, s)
		}
		norm = append(norm, ax)
	}
	slices.Sort(norm)
	var dims []int
	for i, d := range s.Dimensions {
		if !slices.Contains(norm, i) {
			dims = append(dims, d)
		}
	}
	return norm, shapeOf(s.DType, dims...), nil
}

func reduce(op *opDef, name string, t *Tensor, axes []int) *Tensor {
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	norm, shape, err := reduceAxes(name, t.shape, axes)
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	return record(op, attrs{ints: norm}, shape, t)
}

// Sum reduces over axes (all if none), dropping them (torch's keepdim=False).
func (t *Tensor) Sum(axes ...int) *Tensor { return reduce(opSum, "Sum", t, axes) }

// Mean averages over axes (all if none).
func (t *Tensor) Mean(axes ...int) *Tensor {
	if !t.DType().IsFloat() && t.err == nil {
		return t.dev.failed(t.shape, opError("Mean", "needs a float tensor, got %s", t.shape))
	}
	return reduce(opMean, "Mean", t, axes)
}

// Max reduces with maximum over axes (all if none).
func (t *Tensor) Max(axes ...int) *Tensor { return reduce(opMax, "Max", t, axes) }

// Min reduces with minimum over axes (all if none).
func (t *Tensor) Min(axes ...int) *Tensor { return reduce(opMin, "Min", t, axes) }

// ArgMax returns the Int32 index of the maximum along axis, dropping it.
func (t *Tensor) ArgMax(axis int) *Tensor {
	if bad := precheck("ArgMax", t); bad != nil {
		return bad
	}
	norm, shape, err := reduceAxes("ArgMax", t.shape, []int{axis})
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	if t.shape.Dimensions[norm[0]] == 0 {
		// No element has a largest value: torch refuses it too, where
		// XLA would answer 0, an index that does not exist.
		return t.dev.failed(shape, opError("ArgMax", "axis %d of %s has no elements: there is no largest one", axis, t.shape))
	}
	shape.DType = Int32
	return record(opArgMax, attrs{ints: norm}, shape, t)
}
