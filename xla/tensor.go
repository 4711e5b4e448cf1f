package xla

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"
)

// deviceData is a buffer on one device.
type deviceData struct {
	tensor *tensors.Tensor
	shape  shapes.Shape
	// paramNode is this buffer's parameter node in the trace of epoch
	// paramEpoch; reused so a buffer read twice is one program input.
	paramNode  *node
	paramEpoch uint64
	// history is how MarkStep computed this buffer, kept for one step when
	// the value depends on RequiresGrad leaves, so a Backward after reading
	// it (loss.Item() before loss.Backward()) still reaches the leaves.
	// historyLost is set when the step that kept it is over.
	history     *node
	historyLost bool
	// exclusive: a compiled step stored this buffer in exactly one tensor
	// and nothing else has read it since (no trace, Assign or To took it),
	// so the step that overwrites that tensor may donate it. donated: it
	// was given to a program and must never be read.
	exclusive bool
	donated   bool
	// producer is the execution that computed the buffer (nil for an
	// upload): reading the buffer finishes it.
	producer *stepExecution
}

// Tensor is a handle to a value on one device. The value is either
// materialized (a device buffer) or pending (a node in the trace, computed at
// the next MarkStep). Ops never run when called: they record nodes.
//
// Errors are sticky: an op given bad shapes returns a Tensor that carries
// the error (Err), every op on it carries the same error, and MarkStep,
// Item and ToHost return it. Ops never panic on bad input.
//
// A Tensor is not safe for concurrent use; each replica uses its own.
type Tensor struct {
	dev   *Device
	shape shapes.Shape
	node  *node       // pending value, or nil
	data  *deviceData // materialized value, or nil
	err   error

	requiresGrad bool
	grad         *Tensor
}

// settle makes a handle whose pending node a MarkStep computed hold the
// buffer. MarkStep settles the handles it knows of; a handle that shares
// the node settles when next used.
func (t *Tensor) settle() {
	if t.node != nil && t.node.data != nil {
		t.data, t.node = t.node.data, nil
	}
}

// tracksGrad reports whether ops on t carry a gradient path to a leaf.
func (t *Tensor) tracksGrad() bool {
	t.settle()
	switch {
	case t.requiresGrad:
		return true
	case t.node != nil:
		return t.node.needsGrad
	case t.data != nil:
		// A lost history still marks the path, so Backward through it is
		// an error instead of a silently missing gradient.
		return t.data.history != nil || t.data.historyLost
	}
	return false
}

// Shape returns the tensor's shape (dtype and dimensions).
func (t *Tensor) Shape() shapes.Shape { return t.shape }

// DType returns the element type.
func (t *Tensor) DType() DType { return t.shape.DType }

// Dims returns a copy of the dimensions (nil for a scalar).
func (t *Tensor) Dims() []int { return slices.Clone(t.shape.Dimensions) }

// Rank returns the number of dimensions.
func (t *Tensor) Rank() int { return t.shape.Rank() }

// Device returns the device the tensor lives on.
func (t *Tensor) Device() *Device { return t.dev }

// Err returns the error the tensor carries, if an op that produced it failed.
func (t *Tensor) Err() error { return t.err }

// Fail returns a tensor of t's shape on t's device carrying err (t's own
// error first, if it has one): what a layer that cannot compute returns,
// so the failure reaches MarkStep, Backward or a read with its cause.
func (t *Tensor) Fail(err error) *Tensor {
	if t.err != nil {
		return t
	}
	return t.dev.failed(t.shape, err)
}

// IsPending reports whether the value waits for the next MarkStep.
func (t *Tensor) IsPending() bool {
	t.settle()
	return t.node != nil
}

// String describes the tensor without computing it.
func (t *Tensor) String() string {
	t.settle()
	state := "materialized"
	switch {
	case t.err != nil:
		state = "error: " + t.err.Error()
	case t.node != nil:
		state = "pending " + t.node.op.name
	}
	return fmt.Sprintf("Tensor(%s on %s, %s)", t.shape, t.dev, state)
}

// Assign makes t hold src's value, as torch's in-place update does: the
// handle stays the same object, so parameters keep their identity across
// steps. Shapes must match.
func (t *Tensor) Assign(src *Tensor) error {
	if err := sameDevice("Assign", t, src); err != nil {
		return err
	}
	if src.err != nil {
		return src.err
	}
	src.settle()
	if !t.shape.Equal(src.shape) {
		return fmt.Errorf("xla: Assign: destination is %s but source is %s", t.shape, src.shape)
	}
	t.node, t.data, t.err = src.node, src.data, nil
	if t.data != nil {
		t.data.exclusive = false
	}
	if t.node != nil {
		t.dev.trackPending(t)
	} else {
		t.dev.observer.noteAssigned(t)
	}
	return nil
}

// valueNode returns the node that reads t in the current trace: its pending
// node, or a parameter node for its buffer.
func (t *Tensor) valueNode() *node {
	t.settle()
	if t.node != nil {
		return t.node
	}
	t.dev.observer.noteRead(t)
	return t.dev.parameterNode(t.data)
}

// parameterNode is the node that reads buffer d in the current trace; a
// buffer read twice is one program input.
func (dev *Device) parameterNode(d *deviceData) *node {
	d.exclusive = false
	epoch := dev.epoch()
	if d.paramNode == nil || d.paramEpoch != epoch {
		d.paramNode = &node{op: opParameter, shape: d.shape, data: d}
		d.paramEpoch = epoch
	}
	return d.paramNode
}

// sameDevice checks that every tensor lives on the same device.
func sameDevice(op string, ts ...*Tensor) error {
	for _, x := range ts[1:] {
		if x.dev != ts[0].dev {
			return fmt.Errorf("xla: %s: operands on different devices (%s and %s): copy one with Tensor.To(ctx, device)", op, ts[0].dev, x.dev)
		}
	}
	return nil
}
