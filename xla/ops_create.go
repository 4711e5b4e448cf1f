package xla

import (
	"fmt"
	"unsafe"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// maxCachedScalars bounds Device.scalars; a program that feeds a new value
// every step (a decaying LR) must not grow it without limit.
const maxCachedScalars = 256

// FromSlice copies host data to device d as a tensor of the given dims
// (none for a scalar, which needs len(data) == 1).
func FromSlice[T dtypes.Supported](d *Device, data []T, dims ...int) (*Tensor, error) {
	shape, err := checkDims("FromSlice", dtypes.FromGenericsType[T](), dims)
	if err != nil {
		return nil, err
	}
	if size := shape.Size(); size != len(data) {
		return nil, fmt.Errorf("xla: FromSlice: %d values for dimensions %v (%d elements)", len(data), dims, size)
	}
	if shape.Size() == 0 {
		return d.empty(shape), nil
	}
	// The plugin copies the values during the call: nothing in between.
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), int(shape.Memory()))
	dd, err := d.uploadBytes(shape, raw)
	if err != nil {
		return nil, err
	}
	return d.noteCreated(&Tensor{dev: d, shape: dd.shape, data: dd}), nil
}

// scalar returns a literal v as a scalar of dtype: a constant for 0 and 1,
// else an uploaded value (cached), as torch-xla treats Python scalars.
func (d *Device) scalar(v float64, dtype DType) *Tensor {
	if v == 0 || v == 1 {
		return recordOn(d, opConstant, attrs{float: v}, shapeOf(dtype))
	}
	return d.Hyperparameter(v, dtype)
}

// Hyperparameter returns v as a scalar of dtype that is always a program
// input, never a constant, whatever its value: a learning rate that a
// scheduler moves to or from 0 or 1 changes an input, not the program.
// Optimizers feed their learning rate through it. Values are uploaded once
// and cached per device, but every call is its own program input: were two
// uses of one value a single input, the program's structure would change
// when a learning rate happens to equal another scalar.
func (d *Device) Hyperparameter(v float64, dtype DType) *Tensor {
	if err := checkShape("Hyperparameter", shapeOf(dtype)); err != nil {
		return d.failed(shapeOf(dtype), err)
	}
	if lo, hi := integerRange(dtype); isInteger(dtype) && !(v >= lo && v < hi) { // !(...) is true for NaN
		return d.failed(shapeOf(dtype), fmt.Errorf("xla: the scalar %g does not fit %s (from %g to below %g)", v, dtype, lo, hi))
	}
	key := scalarKey{dtype: dtype, value: v}
	if dd, ok := d.scalars[key]; ok {
		return d.noteCreated(&Tensor{dev: d, shape: dd.shape, data: &deviceData{tensor: dd.tensor, shape: dd.shape}})
	}
	host := tensors.FromShape(shapeOf(dtype))
	if err := host.MutableFlatData(func(flat any) { setFlat(flat, 0, v) }); err != nil {
		return d.failed(shapeOf(dtype), fmt.Errorf("xla: scalar %g as %s: %w", v, dtype, err))
	}
	dd, err := d.upload(host)
	if err != nil {
		return d.failed(shapeOf(dtype), err)
	}
	if len(d.scalars) >= maxCachedScalars {
		clear(d.scalars)
	}
	d.scalars[key] = dd
	return d.noteCreated(&Tensor{dev: d, shape: dd.shape, data: dd})
}

// setFlat stores v at flat[i] converted to the slice's element type.
func setFlat(flat any, i int, v float64) {
	switch f := flat.(type) {
	case []float32:
		f[i] = float32(v)
	case []float64:
		f[i] = v
	case []bfloat16.BFloat16:
		f[i] = bfloat16.FromFloat64(v)
	case []int32:
		f[i] = int32(v)
	case []int64:
		f[i] = int64(v)
	case []uint64:
		f[i] = uint64(v)
	case []bool:
		f[i] = v != 0
	default:
		panic(fmt.Sprintf("xla: scalar of element type %T is not supported", flat))
	}
}

// empty returns a zero-size tensor: it holds no values, so it is a
// constant of the program rather than a device buffer (PJRT cannot
// upload zero bytes).
func (d *Device) empty(shape shapes.Shape) *Tensor {
	return recordOn(d, opConstant, attrs{float: 0}, shape)
}

// Full returns a tensor of dims filled with v.
func (d *Device) Full(v float64, dtype DType, dims ...int) *Tensor {
	if _, err := checkDims("Full", dtype, dims); err != nil {
		return d.failed(shapeOf(dtype, dims...), err)
	}
	s := d.scalar(v, dtype)
	if len(dims) == 0 {
		return s
	}
	return s.BroadcastTo(dims...)
}

// Zeros returns a tensor of zeros.
func (d *Device) Zeros(dtype DType, dims ...int) *Tensor {
	return d.constant("Zeros", 0, dtype, dims)
}

// Ones returns a tensor of ones.
func (d *Device) Ones(dtype DType, dims ...int) *Tensor {
	return d.constant("Ones", 1, dtype, dims)
}

func (d *Device) constant(op string, v float64, dtype DType, dims []int) *Tensor {
	shape, err := checkDims(op, dtype, dims)
	if err != nil {
		return d.failed(shape, err)
	}
	return recordOn(d, opConstant, attrs{float: v}, shape)
}

var opIota = &opDef{name: "iota", replay: func(rc *replayContext, n *node, _ []*graph.Node) *graph.Node {
	return graph.Iota(rc.graph, n.shape, n.attrs.ints[0])
}}

// Arange returns 0, 1, ..., n-1.
func (d *Device) Arange(n int, dtype DType) *Tensor {
	shape, err := checkDims("Arange", dtype, []int{n})
	if err != nil {
		return d.failed(shape, err)
	}
	return recordOn(d, opIota, attrs{ints: []int{0}}, shape)
}

// opRandom draws from the device RNG state (input 0): attrs.str is
// "normal" or "uniform". It outputs the values; opRandomState outputs the
// advanced state of the same draw.
var (
	opRandom = &opDef{name: "random", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
		state, values := drawRandom(n.attrs.str, in[0], n.shape)
		rc.randomStates[n] = state
		return values
	}}
	opRandomState = &opDef{name: "random_state", replay: func(rc *replayContext, n *node, _ []*graph.Node) *graph.Node {
		return rc.randomStates[n.inputs[0]]
	}}
)

func drawRandom(kind string, state *graph.Node, shape shapes.Shape) (*graph.Node, *graph.Node) {
	if kind == "normal" {
		return graph.RandomNormal(state, shape)
	}
	return drawUniform(state, shape)
}

func (d *Device) random(kind string, dtype DType, dims []int) *Tensor {
	if _, err := checkDims("Rand", dtype, dims); err != nil {
		return d.failed(shapeOf(dtype, dims...), err)
	}
	if !dtype.IsFloat() {
		return d.failed(shapeOf(dtype, dims...), opError("Rand", "needs a float dtype, got %s", dtype))
	}
	if d.rng.err != nil {
		return d.failed(shapeOf(dtype, dims...), d.rng.err)
	}
	values := record(opRandom, attrs{str: kind}, shapeOf(dtype, dims...), d.rng)
	next := &node{op: opRandomState, inputs: []*node{values.node}, shape: d.rng.shape}
	d.rng = d.newPending(next)
	return values
}

// RandN returns standard normal samples from the device's RNG.
func (d *Device) RandN(dtype DType, dims ...int) *Tensor { return d.random("normal", dtype, dims) }

// RandU returns uniform samples in [0, 1) from the device's RNG.
func (d *Device) RandU(dtype DType, dims ...int) *Tensor { return d.random("uniform", dtype, dims) }
