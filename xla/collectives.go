package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// ReduceOp is how AllReduce combines the replicas' values.
type ReduceOp int

const (
	ReduceSum ReduceOp = iota
	ReduceMean
	ReduceMin
	ReduceMax
	ReduceProduct
)

func (op ReduceOp) String() string {
	switch op {
	case ReduceSum:
		return "SUM"
	case ReduceMean:
		return "MEAN"
	case ReduceMin:
		return "MIN"
	case ReduceMax:
		return "MAX"
	case ReduceProduct:
		return "PRODUCT"
	}
	return fmt.Sprintf("ReduceOp(%d)", int(op))
}

var opAllReduce = &opDef{name: "all_reduce", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	op := ReduceOp(n.attrs.ints[0])
	kinds := map[ReduceOp]backends.ReduceOpType{
		ReduceSum: backends.ReduceOpSum, ReduceMean: backends.ReduceOpSum,
		ReduceMin: backends.ReduceOpMin, ReduceMax: backends.ReduceOpMax, ReduceProduct: backends.ReduceOpProduct,
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
