package xla

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
	reduceop "github.com/xladdp/xladdp/reduce"
)

// ReduceOp is how AllReduce combines the replicas' values: the type
// package ddp's process group uses too (package reduce).
type ReduceOp = reduceop.Op

// The reduce ops, named as torch-xla names them (xm.REDUCE_SUM, ...).
const (
	ReduceSum     = reduceop.Sum
	ReduceMean    = reduceop.Avg
	ReduceMin     = reduceop.Min
	ReduceMax     = reduceop.Max
	ReduceProduct = reduceop.Product
)

var opAllReduce = &opDef{name: "all_reduce", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	if rc.numReplicas == 1 {
		// A group of one: XLA's CPU all-reduce would still rendezvous.
		return in[0]
	}
	op := ReduceOp(n.attrs.ints[0])
	kinds := map[ReduceOp]compute.ReduceOpType{
		ReduceSum: compute.ReduceOpSum, ReduceMean: compute.ReduceOpSum,
		ReduceMin: compute.ReduceOpMin, ReduceMax: compute.ReduceOpMax, ReduceProduct: compute.ReduceOpProduct,
	}
	out := rc.graph.Distributed().AllReduceOne(in[0], kinds[op])
	if op == ReduceMean {
		out = graph.DivScalar(out, float64(rc.numReplicas))
	}
	return out
}}

// AllReduce combines t across the local replicas (RunReplicas) in-graph, as
// an XLA all-reduce over the device collectives. Outside RunReplicas it is
// the identity (a group of one).
func AllReduce(t *Tensor, op ReduceOp) *Tensor {
	const name = "AllReduce"
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	if op < ReduceSum || op > ReduceProduct {
		return t.dev.failed(t.shape, opError(name, "unknown reduce op %d", int(op)))
	}
	if op == ReduceMean && !t.DType().IsFloat() {
		return t.dev.failed(t.shape, opError(name, "MEAN of %s: needs a float tensor", t.shape))
	}
	return record(opAllReduce, attrs{ints: []int{int(op)}}, t.shape, t)
}

// replicaIndex returns this device's position in its current group as an
// Int32 scalar on the device: a program input whose value differs per
// replica while the traced program stays the same.
func (d *Device) replicaIndex() (*Tensor, int) {
	g := d.currentGroup()
	pos := g.position(d)
	if d.positions == nil {
		d.positions = map[int]*deviceData{}
	}
	if dd, ok := d.positions[pos]; ok {
		return d.noteCreated(&Tensor{dev: d, shape: dd.shape, data: dd}), len(g.devices)
	}
	t, err := FromSlice(d, []int32{int32(pos)})
	if err != nil {
		return d.failed(shapeOf(Int32), err), len(g.devices)
	}
	d.positions[pos] = t.data
	return t, len(g.devices)
}

// startIndices returns scalar start indices that are zero except
// position*size along axis.
func startIndices(g *graph.Graph, rank, axis int, position *graph.Node, size int) []*graph.Node {
	starts := make([]*graph.Node, rank)
	for i := range starts {
		if i == axis {
			starts[i] = graph.MulScalar(position, float64(size))
		} else {
			starts[i] = graph.ScalarZero(g, position.DType())
		}
	}
	return starts
}

// opAllGather: inputs are the tensor and the replica index; each replica
// writes its part into zeros at its offset, and a SUM all-reduce assembles
// the whole. GoMLX (v0.28.16) exposes no all-gather, so this spends n times the
// bandwidth of a native one.
var opAllGather = &opDef{name: "all_gather", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	axis := n.attrs.ints[0]
	x, pos := in[0], in[1]
	whole := graph.Zeros(rc.graph, n.shape)
	placed := graph.DynamicUpdateSlice(whole, x, startIndices(rc.graph, x.Rank(), axis, pos, x.Shape().Dimensions[axis]))
	if rc.numReplicas == 1 {
		return placed
	}
	return rc.graph.Distributed().AllReduceOne(placed, compute.ReduceOpSum)
}}

// opReduceScatter: all-reduce, then each replica keeps its slice.
var opReduceScatter = &opDef{name: "reduce_scatter", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	axis := n.attrs.ints[0]
	reduced := opAllReduce.replay(rc, &node{attrs: attrs{ints: []int{n.attrs.ints[1]}}}, in[:1])
	part := n.shape.Dimensions[axis]
	return graph.DynamicSlice(reduced, startIndices(rc.graph, reduced.Rank(), axis, in[1], part), n.shape.Dimensions)
}}

// AllGather concatenates every replica's t along axis, in replica order.
func AllGather(t *Tensor, axis int) *Tensor {
	const name = "AllGather"
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	ax, err := normalizeAxis(name, axis, t.Rank())
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	pos, n := t.dev.replicaIndex()
	dims := slices.Clone(t.Dims())
	dims[ax] *= n
	return record(opAllGather, attrs{ints: []int{ax}}, shapeOf(t.DType(), dims...), t, pos)
}

// ReduceScatter reduces t across replicas with op and gives replica i the
// i-th of n equal parts along axis; t's size along axis must divide by n.
func ReduceScatter(t *Tensor, op ReduceOp, axis int) *Tensor {
	const name = "ReduceScatter"
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	ax, err := normalizeAxis(name, axis, t.Rank())
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	if !op.Valid() || (op == ReduceMean && !t.DType().IsFloat()) {
		return t.dev.failed(t.shape, opError(name, "reduce op %s on %s", op, t.shape))
	}
	pos, n := t.dev.replicaIndex()
	if t.Dims()[ax]%n != 0 {
		return t.dev.failed(t.shape, opError(name, "axis %d of %s does not divide among %d replicas", ax, t.shape, n))
	}
	dims := slices.Clone(t.Dims())
	dims[ax] /= n
	return record(opReduceScatter, attrs{ints: []int{ax, int(op)}}, shapeOf(t.DType(), dims...), t, pos)
}

// bitsDTypes maps each dtype to the integer type of its width that carries
// its bits through a SUM all-reduce unchanged (adding zeros to an integer
// is exact; to a float it turns -0 into +0 and may touch NaN payloads).
var bitsDTypes = map[DType]DType{
	Float32: Int32, Float64: Int64, BFloat16: dtypes.Int16, Uint64: Int64, Int32: Int32, Int64: Int64, Bool: Int32,
}

// opBroadcastFrom: inputs are the tensor and the replica index; the root keeps
// its bits, every other replica contributes zeros, and a SUM all-reduce of
// the bits gives every replica the root's value exactly.
var opBroadcastFrom = &opDef{name: "broadcast_from_replica", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	x, pos := in[0], in[1]
	if rc.numReplicas == 1 {
		return x
	}
	dt := x.DType()
	bits := bitsDTypes[dt]
	var xi *graph.Node
	if dt == Bool {
		xi = graph.ConvertDType(x, bits)
	} else {
		xi = graph.Bitcast(x, bits)
	}
	isRoot := graph.Equal(pos, graph.Scalar(rc.graph, pos.DType(), n.attrs.ints[0]))
	mine := graph.Where(isRoot, xi, graph.ScalarZero(rc.graph, bits))
	sum := rc.graph.Distributed().AllReduceOne(mine, compute.ReduceOpSum)
	if dt == Bool {
		return graph.NotEqual(sum, graph.ScalarZero(rc.graph, bits))
	}
	return graph.Bitcast(sum, dt)
}}

// Broadcast gives every local replica (RunReplicas) root's value of t,
// bit for bit, in-graph: torch.distributed's broadcast over the device
// collectives. Outside RunReplicas it is the identity.
func Broadcast(t *Tensor, root int) *Tensor {
	const name = "Broadcast"
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	pos, n := t.dev.replicaIndex()
	if root < 0 || root >= n {
		return t.dev.failed(t.shape, opError(name, "root %d outside the %d local replica(s)", root, n))
	}
	if _, ok := bitsDTypes[t.DType()]; !ok {
		return t.dev.failed(t.shape, opError(name, "unsupported dtype %s", t.DType()))
	}
	return record(opBroadcastFrom, attrs{ints: []int{root}}, t.shape, t, pos)
}
