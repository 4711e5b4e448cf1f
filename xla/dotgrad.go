package xla

import (
	"slices"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/graph"
)

// GoMLX v0.26.0's DotGeneral VJP built each operand's gradient as a
// multiply over a broadcast followed by a sum (this rule is kept with
// v0.28.16): for a Linear layer's weight
// that materializes [batch, out, in] (302 MB per step for the MNIST CNN's
// fc1), 250x slower than the two dot_generals JAX emits. dotGeneralGrad
// replaces it, for the dots this package builds, with JAX's rule: each
// operand's gradient is one dot_general of the output gradient with the
// other operand, then a transpose into the operand's axis order (which XLA
// folds into the dot's layout), registered through owngrad.go.

// dotAxes are a dot_general's contracting and batch axes, per operand.
type dotAxes struct {
	lhsContract, lhsBatch, rhsContract, rhsBatch []int
}

// dotGeneral builds a dot_general whose gradient is dotGeneralGrad.
func (rc *replayContext) dotGeneral(a *graph.Node, aContract, aBatch []int, b *graph.Node, bContract, bBatch []int) *graph.Node {
	if rc.widenBFloat16Dots && a.DType() == dtypes.BFloat16 {
		// XLA's CPU backend runs bf16 dots ~8x slower than float32 ones
		// (no bf16 GEMM). Products of bf16 values are exact in float32, so
		// a float32 dot of the widened operands, rounded to bf16, is a bf16
		// dot with float32 accumulation, as bf16 hardware computes it.
		wide := rc.dotGeneral(graph.ConvertDType(a, dtypes.Float32), aContract, aBatch, graph.ConvertDType(b, dtypes.Float32), bContract, bBatch)
		return graph.ConvertDType(wide, dtypes.BFloat16)
	}
	n := graph.DotGeneral(a, aContract, aBatch, b, bContract, bBatch)
	ax := dotAxes{lhsContract: aContract, lhsBatch: aBatch, rhsContract: bContract, rhsBatch: bBatch}
	return rc.withOwnGradient(n, func(v *graph.Node) []*graph.Node { return dotGeneralGrad(n, v, ax) })
}

// dotGeneralGrad returns the gradients of lhs and rhs given v, the gradient
// of n = dot_general(lhs, rhs), whose axes are [batch..., lhs free...,
// rhs free...] (free axes in increasing order).
func dotGeneralGrad(n, v *graph.Node, ax dotAxes) []*graph.Node {
	lhs, rhs := n.Inputs()[0], n.Inputs()[1]
	nb := len(ax.lhsBatch)
	lhsFree := freeAxes(lhs.Rank(), ax.lhsContract, ax.lhsBatch)
	rhsFree := freeAxes(rhs.Rank(), ax.rhsContract, ax.rhsBatch)
	vBatch := iotaFrom(0, nb)
	vLhsFree := iotaFrom(nb, len(lhsFree))
	vRhsFree := iotaFrom(nb+len(lhsFree), len(rhsFree))

	// d lhs = v · rhs over rhs's free axes: [batch..., lhs free..., rhs contracting (sorted)...].
	gl := graph.DotGeneral(v, vRhsFree, vBatch, rhs, rhsFree, ax.rhsBatch)
	lhsPerm := make([]int, lhs.Rank())
	for i, a := range ax.lhsBatch {
		lhsPerm[a] = i
	}
	for j, a := range lhsFree {
		lhsPerm[a] = nb + j
	}
	rhsContractSorted := slices.Sorted(slices.Values(ax.rhsContract))
	for k, a := range ax.lhsContract {
		lhsPerm[a] = nb + len(lhsFree) + slices.Index(rhsContractSorted, ax.rhsContract[k])
	}

	// d rhs = lhs · v over lhs's free axes: [batch..., lhs contracting (sorted)..., rhs free...].
	gr := graph.DotGeneral(lhs, lhsFree, ax.lhsBatch, v, vLhsFree, vBatch)
	rhsPerm := make([]int, rhs.Rank())
	for i, a := range ax.rhsBatch {
		rhsPerm[a] = i
	}
	lhsContractSorted := slices.Sorted(slices.Values(ax.lhsContract))
	for k, a := range ax.rhsContract {
		rhsPerm[a] = nb + slices.Index(lhsContractSorted, ax.lhsContract[k])
	}
	for j, a := range rhsFree {
		rhsPerm[a] = nb + len(ax.lhsContract) + j
	}
	return []*graph.Node{transposeTo(gl, lhsPerm), transposeTo(gr, rhsPerm)}
}

// transposeTo returns x with operand axis a taken from x's axis perm[a],
// or x itself when perm is the identity.
func transposeTo(x *graph.Node, perm []int) *graph.Node {
	identity := true
	for a, p := range perm {
		identity = identity && a == p
	}
	if identity {
		return x
	}
	// Output axis a of TransposeAllAxes reads input axis perm[a].
	return graph.TransposeAllAxes(x, perm...)
}

// freeAxes are the axes of a rank-r operand that are neither contracted
// nor batch, in increasing order.
func freeAxes(rank int, contract, batch []int) []int {
	var free []int
	for a := range rank {
		if !slices.Contains(contract, a) && !slices.Contains(batch, a) {
			free = append(free, a)
		}
	}
	return free
}

// iotaFrom returns start, start+1, ..., start+n-1.
func iotaFrom(start, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = start + i
	}
	return s
}
