package xla

import (
	"math"
	"slices"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// broadcastShapes applies NumPy broadcasting to two shapes of one dtype.
func broadcastShapes(op string, a, b shapes.Shape) (shapes.Shape, error) {
	if a.DType != b.DType {
		return shapes.Shape{}, opError(op, "dtypes differ: %s and %s (convert one with Cast)", a, b)
	}
	rank := max(a.Rank(), b.Rank())
	dims := make([]int, rank)
	for i := range rank {
		da, db := dimFromRight(a, rank-1-i), dimFromRight(b, rank-1-i)
		switch {
		case da == db, db == 1:
			dims[i] = da
		case da == 1:
			dims[i] = db
		default:
			return shapes.Shape{}, opError(op, "shapes %s and %s do not broadcast (dimension %d: %d vs %d)",
				a, b, i, da, db)
		}
	}
	return shapeOf(a.DType, dims...), nil
}

// dimFromRight returns dimension k counted from the right (0 is the last),
// or 1 beyond the rank.
func dimFromRight(s shapes.Shape, k int) int {
	if k >= s.Rank() {
		return 1
	}
	return s.Dimensions[s.Rank()-1-k]
}

// broadcastTo expands x to dims: left-pads the rank with 1s, then broadcasts.
func broadcastTo(x *graph.Node, dims []int) *graph.Node {
	if slices.Equal(x.Shape().Dimensions, dims) {
		return x
	}
	if x.Rank() < len(dims) {
		padded := make([]int, len(dims))
		for i := range padded {
			padded[i] = 1
		}
		copy(padded[len(dims)-x.Rank():], x.Shape().Dimensions)
		x = graph.Reshape(x, padded...)
	}
	return graph.BroadcastToDims(x, dims...)
}

// binaryOpDef replays a broadcasting binary op.
func binaryOpDef(name string, f func(a, b *graph.Node) *graph.Node) *opDef {
	return &opDef{name: name, elementwise: true, broadcasting: true, replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		dims := n.attrs.ints
		return f(broadcastTo(in[0], dims), broadcastTo(in[1], dims))
	}}
}

var (
	opAdd     = binaryOpDef("add", graph.Add)
	opSub     = binaryOpDef("sub", graph.Sub)
	opMul     = binaryOpDef("mul", graph.Mul)
	opDiv     = binaryOpDef("div", graph.Div)
	opPow     = binaryOpDef("pow", graph.Pow)
	opMaximum = binaryOpDef("maximum", graph.Max)
	opMinimum = binaryOpDef("minimum", graph.Min)

	opEqual        = binaryOpDef("equal", graph.Equal)
	opNotEqual     = binaryOpDef("not_equal", graph.NotEqual)
	opLess         = binaryOpDef("less", graph.LessThan)
	opLessEqual    = binaryOpDef("less_equal", graph.LessOrEqual)
	opGreater      = binaryOpDef("greater", graph.GreaterThan)
	opGreaterEqual = binaryOpDef("greater_equal", graph.GreaterOrEqual)
)

// arithmeticOps have no meaning on Bool (XLA refuses them at compile time).
var arithmeticOps = map[*opDef]bool{opAdd: true, opSub: true, opMul: true, opDiv: true, opPow: true, opNeg: true, opAbs: true}

func noBoolArithmetic(op string, s shapes.Shape) error {
	return opError(op, "arithmetic on %s: Bool has none; Cast to Int32 or Float32 first (or use Where)", s)
}

// binary records a broadcasting op; comparisons produce Bool.
func binaryOp(op *opDef, a, b *Tensor, comparison bool) *Tensor {
	if bad := precheck(op.name, a, b); bad != nil {
		return bad
	}
	shape, err := broadcastShapes(op.name, a.shape, b.shape)
	if err != nil {
		return a.dev.failed(a.shape, err)
	}
	if a.DType() == Bool && arithmeticOps[op] {
		return a.dev.failed(a.shape, noBoolArithmetic(op.name, a.shape))
	}
	// attrs carry the output dims so replay broadcasts without re-deriving.
	at := attrs{ints: slices.Clone(shape.Dimensions)}
	if comparison {
		shape.DType = Bool
	}
	return record(op, at, shape, a, b)
}

// Add returns t + o with NumPy broadcasting; dtypes must match.
func (t *Tensor) Add(o *Tensor) *Tensor { return binaryOp(opAdd, t, o, false) }

// Sub returns t - o with broadcasting.
func (t *Tensor) Sub(o *Tensor) *Tensor { return binaryOp(opSub, t, o, false) }

// Mul returns t * o (elementwise) with broadcasting.
func (t *Tensor) Mul(o *Tensor) *Tensor { return binaryOp(opMul, t, o, false) }

// Div returns t / o with broadcasting.
func (t *Tensor) Div(o *Tensor) *Tensor { return binaryOp(opDiv, t, o, false) }

// Pow returns t ** o with broadcasting.
func (t *Tensor) Pow(o *Tensor) *Tensor { return binaryOp(opPow, t, o, false) }

// Maximum returns the elementwise maximum with broadcasting.
func (t *Tensor) Maximum(o *Tensor) *Tensor { return binaryOp(opMaximum, t, o, false) }

// Minimum returns the elementwise minimum with broadcasting.
func (t *Tensor) Minimum(o *Tensor) *Tensor { return binaryOp(opMinimum, t, o, false) }

// Equal returns t == o as Bool.
func (t *Tensor) Equal(o *Tensor) *Tensor { return binaryOp(opEqual, t, o, true) }

// NotEqual returns t != o as Bool.
func (t *Tensor) NotEqual(o *Tensor) *Tensor { return binaryOp(opNotEqual, t, o, true) }

// Less returns t < o as Bool.
func (t *Tensor) Less(o *Tensor) *Tensor { return binaryOp(opLess, t, o, true) }

// LessEqual returns t <= o as Bool.
func (t *Tensor) LessEqual(o *Tensor) *Tensor { return binaryOp(opLessEqual, t, o, true) }

// Greater returns t > o as Bool.
func (t *Tensor) Greater(o *Tensor) *Tensor { return binaryOp(opGreater, t, o, true) }

// GreaterEqual returns t >= o as Bool.
func (t *Tensor) GreaterEqual(o *Tensor) *Tensor { return binaryOp(opGreaterEqual, t, o, true) }

// AddScalar returns t + v.
func (t *Tensor) AddScalar(v float64) *Tensor { return t.withScalar("AddScalar", v, (*Tensor).Add) }

// SubScalar returns t - v.
func (t *Tensor) SubScalar(v float64) *Tensor { return t.withScalar("SubScalar", v, (*Tensor).Sub) }

// MulScalar returns t * v.
func (t *Tensor) MulScalar(v float64) *Tensor { return t.withScalar("MulScalar", v, (*Tensor).Mul) }

// DivScalar returns t / v (truncated toward zero on integer tensors).
func (t *Tensor) DivScalar(v float64) *Tensor { return t.withScalar("DivScalar", v, (*Tensor).Div) }

// PowScalar returns t ** v.
func (t *Tensor) PowScalar(v float64) *Tensor { return t.withScalar("PowScalar", v, (*Tensor).Pow) }

// withScalar applies op to t and v as a scalar of t's dtype. On an integer
// tensor a v the dtype cannot hold exactly (fractional, NaN, infinite, out
// of range), a division by 0 or a negative power is an error: torch would
// promote to a float tensor or raise, and a truncated operand would be a
// silently wrong answer.
func (t *Tensor) withScalar(name string, v float64, op func(t, s *Tensor) *Tensor) *Tensor {
	if t.err == nil && isInteger(t.DType()) {
		if err := checkIntegerOperand(name, v, t.DType()); err != nil {
			return t.dev.failed(t.shape, err)
		}
	}
	return op(t, t.dev.scalar(v, t.DType()))
}

func checkIntegerOperand(name string, v float64, dt DType) error {
	lo, hi := integerRange(dt)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v != math.Trunc(v) || v < lo || v >= hi:
		return opError(name, "a %s tensor cannot hold the scalar %g, and truncating it would give a wrong answer; "+
			"for torch's float result convert the tensor first (t.Cast(xla.Float32))", dt, v)
	case name == "DivScalar" && v == 0:
		return opError(name, "integer division by zero on a %s tensor", dt)
	case name == "PowScalar" && v < 0:
		return opError(name, "a %s tensor to the negative power %g (torch refuses it too); cast it to a float dtype first", dt, v)
	}
	return nil
}

// isInteger reports whether dt is an integer dtype (Bool is not).
func isInteger(dt DType) bool { return dt == Int32 || dt == Int64 || dt == Uint64 }

// integerRange is the values an integer dtype holds, as [lo, hi).
func integerRange(dt DType) (lo, hi float64) {
	switch dt {
	case Int32:
		return math.MinInt32, -math.MinInt32
	case Int64:
		return math.MinInt64, -math.MinInt64
	case Uint64:
		return 0, 2 * -float64(math.MinInt64)
	}
	return math.Inf(-1), math.Inf(1)
}

var opWhere = &opDef{name: "where", elementwise: true, broadcasting: true, replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
	dims := n.attrs.ints
	return graph.Where(broadcastTo(in[0], dims), broadcastTo(in[1], dims), broadcastTo(in[2], dims))
}}

// Where returns onTrue where cond holds, else onFalse, with broadcasting.
// cond must be Bool; onTrue and onFalse share a dtype.
func Where(cond, onTrue, onFalse *Tensor) *Tensor {
	const op = "Where"
	if bad := precheck(op, cond, onTrue, onFalse); bad != nil {
		return bad
	}
	if cond.DType() != Bool {
		return cond.dev.failed(onTrue.shape, opError(op, "condition is %s, want Bool (use a comparison)", cond.shape))
	}
	values, err := broadcastShapes(op, onTrue.shape, onFalse.shape)
	if err == nil {
		condShape := cond.shape
		condShape.DType = values.DType
		values, err = broadcastShapes(op, values, condShape)
	}
	if err != nil {
		return cond.dev.failed(onTrue.shape, err)
	}
	return record(opWhere, attrs{ints: slices.Clone(values.Dimensions)}, values, cond, onTrue, onFalse)
}

// unaryOpDef replays a shape-preserving op.
func unaryOpDef(name string, f func(*graph.Node) *graph.Node) *opDef {
	return &opDef{name: name, elementwise: true, replay: func(_ *replayContext, _ *node, in []*graph.Node) *graph.Node { return f(in[0]) }}
}

var (
	opNeg     = unaryOpDef("neg", graph.Neg)
	opAbs     = unaryOpDef("abs", graph.Abs)
	opExp     = unaryOpDef("exp", graph.Exp)
	opLog     = unaryOpDef("log", graph.Log)
	opSqrt    = unaryOpDef("sqrt", graph.Sqrt)
	opTanh    = unaryOpDef("tanh", graph.Tanh)
	opErf     = unaryOpDef("erf", graph.Erf)
	opSigmoid = unaryOpDef("sigmoid", graph.Sigmoid)
	opRelu    = unaryOpDef("relu", func(x *graph.Node) *graph.Node {
		return graph.Max(x, graph.ZerosLike(x))
	})
	opSquare = unaryOpDef("square", graph.Square)
)

// unaryFloat records a float-only elementwise op.
func unaryFloat(op *opDef, name string, t *Tensor) *Tensor {
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	if !t.DType().IsFloat() {
		return t.dev.failed(t.shape, opError(name, "needs a float tensor, got %s (convert with Cast)", t.shape))
	}
	return record(op, attrs{}, t.shape, t)
}

// Neg returns -t.
func (t *Tensor) Neg() *Tensor {
	if bad := precheck("Neg", t); bad != nil {
		return bad
	}
	if t.DType() == Bool {
		return t.dev.failed(t.shape, noBoolArithmetic("Neg", t.shape))
	}
	return record(opNeg, attrs{}, t.shape, t)
}

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor {
	if bad := precheck("Abs", t); bad != nil {
		return bad
	}
	if t.DType() == Bool {
		return t.dev.failed(t.shape, noBoolArithmetic("Abs", t.shape))
	}
	return record(opAbs, attrs{}, t.shape, t)
}

// Exp returns e**t.
func (t *Tensor) Exp() *Tensor { return unaryFloat(opExp, "Exp", t) }

// Log returns the natural logarithm.
func (t *Tensor) Log() *Tensor { return unaryFloat(opLog, "Log", t) }

// Sqrt returns the square root.
func (t *Tensor) Sqrt() *Tensor { return unaryFloat(opSqrt, "Sqrt", t) }

// Tanh returns the hyperbolic tangent.
func (t *Tensor) Tanh() *Tensor { return unaryFloat(opTanh, "Tanh", t) }

// Erf returns the Gauss error function (exact GELU is x·(1+erf(x/√2))/2).
func (t *Tensor) Erf() *Tensor { return unaryFloat(opErf, "Erf", t) }

// Sigmoid returns 1/(1+e**-t).
func (t *Tensor) Sigmoid() *Tensor { return unaryFloat(opSigmoid, "Sigmoid", t) }

// Relu returns max(t, 0).
func (t *Tensor) Relu() *Tensor { return unaryFloat(opRelu, "Relu", t) }

// Square returns t*t.
func (t *Tensor) Square() *Tensor { return unaryFloat(opSquare, "Square", t) }

var opCast = &opDef{name: "cast", elementwise: true, replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
	return graph.ConvertDType(in[0], n.shape.DType)
}}

// Cast converts to dtype (Float32, BFloat16, Int32, ...).
func (t *Tensor) Cast(dtype DType) *Tensor {
	if bad := precheck("Cast", t); bad != nil {
		return bad
	}
	if dtype == t.DType() {
		return t
	}
	shape := t.shape.Clone()
	shape.DType = dtype
	return record(opCast, attrs{dtype: dtype}, shape, t)
}
