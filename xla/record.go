package xla

import (
	"fmt"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
)

// opParameter marks a node that reads a device buffer: a program input.
var opParameter = &opDef{name: "parameter", replay: func(*replayContext, *node, []*graph.Node) *graph.Node {
	panic("parameters are bound before replay")
}}

// opConstant is a scalar constant (attrs.float) of shape's dtype broadcast to
// shape. Only 0 and 1 are constants: other scalars are uploaded (see
// Device.scalar) so changing them does not recompile.
var opConstant = &opDef{name: "constant", replay: func(rc *replayContext, n *node, _ []*graph.Node) *graph.Node {
	c := graph.ConstAsDType(rc.graph, n.shape.DType, n.attrs.float)
	if n.shape.Rank() == 0 {
		return c
	}
	return graph.BroadcastToDims(c, n.shape.Dimensions...)
}}

// gradientOpName names opGradient; replay finds sibling gradients by it.
const gradientOpName = "gradient"

// opStopGradient passes its input's value and no gradient (Detach).
var opStopGradient = &opDef{name: "stop_gradient", elementwise: true, replay: func(_ *replayContext, _ *node, in []*graph.Node) *graph.Node {
	return graph.StopGradient(in[0])
}}

// opLeaf passes its input's value as a node of its own: a detached
// tensor made RequiresGrad (torch's x.detach().requires_grad_()) takes
// its gradient there, past the stop, which GoMLX's autodiff gives no
// adjoint.
var opLeaf = &opDef{name: "leaf", elementwise: true, replay: func(_ *replayContext, _ *node, in []*graph.Node) *graph.Node {
	return graph.Identity(in[0])
}}

// differentiable reports whether a gradient flows through op's inputs.
func (op *opDef) differentiable() bool { return op != opStopGradient && op != opGradient }

// opGradient is d(inputs[0])/d(inputs[1]).
var opGradient = &opDef{name: gradientOpName, replay: func(rc *replayContext, n *node, _ []*graph.Node) *graph.Node {
	return rc.gradient(n.inputs[0], n.inputs[1])
}}

// precheck returns a tensor carrying an error if an input carries one or
// the inputs live on different devices; nil if the op may proceed.
func precheck(op string, ts ...*Tensor) *Tensor {
	for _, t := range ts {
		if t == nil {
			panic(fmt.Sprintf("xla: %s: nil *Tensor operand", op))
		}
		if t.err != nil {
			return t.dev.failed(t.shape, t.err)
		}
	}
	if err := sameDevice(op, ts...); err != nil {
		return ts[0].dev.failed(ts[0].shape, err)
	}
	return nil
}

// failed returns a tensor carrying err; MarkStep reports it while it is alive.
func (d *Device) failed(shape shapes.Shape, err error) *Tensor {
	t := d.errorTensor(shape, err)
	d.trackPending(t)
	return t
}

// opError formats an op's validation error with its operands' shapes.
func opError(op string, format string, args ...any) error {
	return fmt.Errorf("xla: %s: %s", op, fmt.Sprintf(format, args...))
}

// record adds a node computing op over inputs with a validated shape.
func record(op *opDef, a attrs, shape shapes.Shape, inputs ...*Tensor) *Tensor {
	d := inputs[0].dev
	if err := checkShape(op.name, shape); err != nil {
		return d.failed(shape, err)
	}
	ns := make([]*node, len(inputs))
	needsGrad := false
	for i, t := range inputs {
		ns[i] = t.valueNode()
		needsGrad = needsGrad || t.tracksGrad()
	}
	return d.newPending(&node{op: op, attrs: a, inputs: ns, shape: shape, needsGrad: needsGrad && op.differentiable() && shape.DType.IsFloat()})
}

// recordOn adds a node with no tensor inputs on device d.
func recordOn(d *Device, op *opDef, a attrs, shape shapes.Shape) *Tensor {
	if err := checkShape(op.name, shape); err != nil {
		return d.failed(shape, err)
	}
	return d.newPending(&node{op: op, attrs: a, shape: shape})
}

// normalizeAxis maps a possibly negative axis into [0, rank).
func normalizeAxis(op string, axis, rank int) (int, error) {
	a := axis
	if a < 0 {
		a += rank
	}
	if a < 0 || a >= rank {
		return 0, opError(op, "axis %d out of range for rank %d", axis, rank)
	}
	return a, nil
}

// Failed returns a tensor on like's device that carries err, for code built
// on xla ops (layers, losses) that validates its own inputs: the error then
// travels like any op's, to MarkStep and Item.
func Failed(like *Tensor, err error) *Tensor { return like.dev.failed(like.shape, err) }
