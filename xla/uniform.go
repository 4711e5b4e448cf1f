package xla

import (
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// XLA's CPU backend expands its Philox bit generator into a loop that
// builds four words per counter and concatenates them, and the fused loop
// recomputes the whole Philox block for each word: 3.5 ms for dropout's
// 590k draws in the MNIST CNN at batch 64 on one core. RandU instead draws
// SplitMix64, a counter-based generator (Steele, Lea and Flood 2014; it
// passes BigCrush): value i of a draw is the SplitMix64 finalizer of
// mix(key) + (counter + i + 1)·γ, an elementwise function of i that XLA
// fuses into the draw's consumer. The device state's word 0 is the key
// and word 1 the counter, which each draw advances by its size. RandN
// keeps GoMLX's Philox draw, which advances the state its own way; the
// two functions differ, so a counter range either reuses stays
// independent.

// SplitMix64's constants.
const (
	splitMixGamma = 0x9E3779B97F4A7C15
	splitMixMul1  = 0xBF58476D1CE4E5B9
	splitMixMul2  = 0x94D049BB133111EB
)

// splitMixFinalize is SplitMix64's output function on uint64 z.
func splitMixFinalize(z *graph.Node) *graph.Node {
	g := z.Graph()
	mul := func(x *graph.Node, c uint64) *graph.Node { return graph.Mul(x, graph.Scalar(g, dtypes.Uint64, c)) }
	xorShift := func(x *graph.Node, s uint64) *graph.Node {
		return graph.BitwiseXor(x, graph.BitwiseShiftRightLogicalScalar(x, s))
	}
	z = mul(xorShift(z, 30), splitMixMul1)
	z = mul(xorShift(z, 27), splitMixMul2)
	return xorShift(z, 31)
}

// drawUniform returns values uniform in [0, 1) of shape and the advanced
// state.
func drawUniform(state *graph.Node, shape shapes.Shape) (next, values *graph.Node) {
	g := state.Graph()
	word := func(i int) *graph.Node { return graph.Reshape(graph.Slice(state, graph.AxisRange(i, i+1))) }
	key, counter := splitMixFinalize(word(0)), word(1)
	size := shape.Size()
	index := graph.Iota(g, shapes.Make(dtypes.Uint64, size), 0)
	start := graph.Add(counter, graph.Scalar(g, dtypes.Uint64, uint64(1)))
	z := graph.Add(graph.BroadcastToDims(key, size),
		graph.Mul(graph.Add(index, graph.BroadcastToDims(start, size)), graph.Scalar(g, dtypes.Uint64, uint64(splitMixGamma))))
	bits := graph.Reshape(splitMixFinalize(z), shape.Dimensions...)
	if shape.DType == dtypes.Float64 {
		// The top 53 bits: every value k·2⁻⁵³, exactly.
		values = graph.MulScalar(graph.ConvertDType(graph.BitwiseShiftRightLogicalScalar(bits, uint64(11)), dtypes.Float64), math.Ldexp(1, -53))
	} else {
		// The top 24 bits: every value k·2⁻²⁴, exact in float32; a narrower
		// float may round up to 1, so it is capped below 1.
		values = graph.MulScalar(graph.ConvertDType(graph.BitwiseShiftRightLogicalScalar(bits, uint64(40)), dtypes.Float32), math.Ldexp(1, -24))
		if shape.DType != dtypes.Float32 {
			below1 := graph.Scalar(g, shape.DType, largestBelowOne(shape.DType))
			values = graph.Min(graph.ConvertDType(values, shape.DType), graph.BroadcastToDims(below1, shape.Dimensions...))
		}
	}
	advanced := graph.Add(counter, graph.Scalar(g, dtypes.Uint64, uint64(size)))
	next = graph.Concatenate([]*graph.Node{
		graph.Slice(state, graph.AxisRange(0, 1)), graph.Reshape(advanced, 1), graph.Slice(state, graph.AxisRange(2, 3)),
	}, 0)
	return next, graph.StopGradient(values)
}

// largestBelowOne is the largest value below 1 of a 16-bit float dtype.
func largestBelowOne(dtype dtypes.DType) float64 {
	if dtype == dtypes.BFloat16 {
		return 1 - math.Ldexp(1, -8)
	}
	return 1 - math.Ldexp(1, -11)
}
