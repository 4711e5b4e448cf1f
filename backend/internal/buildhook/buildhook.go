package buildhook

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
)

// Convolution is a ConvGeneral as GoMLX asks it of the backend, with the
// operands' shapes and where its kernel comes from.
type Convolution struct {
	Input, Kernel                   shapes.Shape
	Axes                            compute.ConvolveAxesConfig
	Strides                         []int
	Paddings                        [][2]int
	InputDilations, KernelDilations []int
	ChannelGroups, BatchGroups      int
	// KernelReversed: the kernel is a Reverse of Unreversed over its
	// spatial axes (as GoMLX's input gradient builds it).
	KernelReversed bool
	Unreversed     compute.Value
	ReversedAxes   []int
}

// ConvolutionHook builds conv in f, the function of input and kernel,
// in a target's own kernels; built false leaves it to the backend.
type ConvolutionHook func(f compute.Function, input, kernel compute.Value, conv Convolution) (out compute.Value, built bool, err error)

// Wrap returns inner with hook given every convolution of the programs
// built on it. Its data (buffers) are inner's.
func Wrap(inner compute.Backend, hook ConvolutionHook) compute.Backend {
	return &hookedBackend{Backend: inner, hook: hook}
}

type hookedBackend struct {
	compute.Backend
	hook ConvolutionHook
}

func (b *hookedBackend) Builder(name string) compute.Builder {
	inner := b.Backend.Builder(name)
	hb := &hookedBuilder{Builder: inner, hook: b.hook, reversed: map[compute.Value]reverse{}}
	hb.main = hb.wrap(inner.Main(), nil)
	return hb
}

// reverse is a Reverse op's operand and axes.
type reverse struct {
	of   compute.Value
	axes []int
}

type hookedBuilder struct {
	compute.Builder
	hook     ConvolutionHook
	main     *hookedFunction
	reversed map[compute.Value]reverse // a program's reverses, by result
}

func (b *hookedBuilder) Main() compute.Function { return b.main }

func (b *hookedBuilder) NewFunction(name string) (compute.Function, error) {
	f, err := b.Builder.NewFunction(name)
	if err != nil {
		return nil, err
	}
	return b.wrap(f, nil), nil
}

func (b *hookedBuilder) wrap(f compute.Function, parent *hookedFunction) *hookedFunction {
	return &hookedFunction{Function: f, builder: b, parent: parent}
}

// hookedFunction is a function of a hooked builder: GoMLX sees only
// these, go-xla only its own.
type hookedFunction struct {
	compute.Function
	builder *hookedBuilder
	parent  *hookedFunction
}

// unwrap gives go-xla its own function back.
func unwrap(f compute.Function) compute.Function {
	if h, ok := f.(*hookedFunction); ok {
		return h.Function
	}
	return f
}

func (f *hookedFunction) Builder() compute.Builder { return f.builder }

func (f *hookedFunction) Parent() compute.Function {
	if f.parent == nil {
		return nil
	}
	return f.parent
}

func (f *hookedFunction) Closure() (compute.Function, error) {
	c, err := f.Function.Closure()
	if err != nil {
		return nil, err
	}
	return f.builder.wrap(c, f), nil
}

func (f *hookedFunction) Call(target compute.Function, inputs ...compute.Value) ([]compute.Value, error) {
	return f.Function.Call(unwrap(target), inputs...)
}

func (f *hookedFunction) Sort(comparator compute.Function, axis int, isStable bool, inputs ...compute.Value) ([]compute.Value, error) {
	return f.Function.Sort(unwrap(comparator), axis, isStable, inputs...)
}

func (f *hookedFunction) While(cond, body compute.Function, initialState ...compute.Value) ([]compute.Value, error) {
	return f.Function.While(unwrap(cond), unwrap(body), initialState...)
}

func (f *hookedFunction) If(pred compute.Value, trueBranch, falseBranch compute.Function) ([]compute.Value, error) {
	return f.Function.If(pred, unwrap(trueBranch), unwrap(falseBranch))
}

func (f *hookedFunction) Reverse(x compute.Value, axes ...int) (compute.Value, error) {
	out, err := f.Function.Reverse(x, axes...)
	if err == nil {
		f.builder.reversed[out] = reverse{of: x, axes: slices.Clone(axes)}
	}
	return out, err
}

func (f *hookedFunction) ConvGeneral(input, kernel compute.Value, axes compute.ConvolveAxesConfig, strides []int, paddings [][2]int,
	inputDilations, kernelDilations []int, channelGroupCount, batchGroupCount int) (compute.Value, error) {
	conv, err := f.describe(input, kernel)
	if err != nil {
		return nil, err
	}
	conv.Axes, conv.Strides, conv.Paddings = axes, strides, paddings
	conv.InputDilations, conv.KernelDilations = inputDilations, kernelDilations
	conv.ChannelGroups, conv.BatchGroups = channelGroupCount, batchGroupCount
	out, built, err := f.builder.hook(f.Function, input, kernel, conv)
	if err != nil || built {
		return out, err
	}
	return f.Function.ConvGeneral(input, kernel, axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount)
}

// describe is a convolution's operand shapes and its kernel's origin.
func (f *hookedFunction) describe(input, kernel compute.Value) (Convolution, error) {
	var conv Convolution
	var err error
	if conv.Input, err = f.Function.Shape(input); err != nil {
		return conv, err
	}
	if conv.Kernel, err = f.Function.Shape(kernel); err != nil {
		return conv, err
	}
	if r, ok := f.builder.reversed[kernel]; ok {
		conv.KernelReversed, conv.Unreversed, conv.ReversedAxes = true, r.of, r.axes
	}
	return conv, nil
}
