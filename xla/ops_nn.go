package xla

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors/images"
)

var (
	opSoftmax = &opDef{name: "softmax", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.Softmax(in[0], n.attrs.ints[0])
	}}
	opLogSoftmax = &opDef{name: "log_softmax", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
		return graph.LogSoftmax(in[0], n.attrs.ints[0])
	}}
)

func softmaxLike(op *opDef, name string, t *Tensor, axis int) *Tensor {
	if bad := precheck(name, t); bad != nil {
		return bad
	}
	if !t.DType().IsFloat() {
		return t.dev.failed(t.shape, opError(name, "needs a float tensor, got %s", t.shape))
	}
	ax, err := normalizeAxis(name, axis, t.Rank())
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	return record(op, attrs{ints: []int{ax}}, t.shape, t)
}

// Softmax normalizes exp(t) to sum to 1 along axis.
func (t *Tensor) Softmax(axis int) *Tensor { return softmaxLike(opSoftmax, "Softmax", t, axis) }

// LogSoftmax returns log(Softmax(axis)), computed stably.
func (t *Tensor) LogSoftmax(axis int) *Tensor {
	return softmaxLike(opLogSoftmax, "LogSoftmax", t, axis)
}

// opTakeAlongAxis picks x[..., idx[..., j, ...], ...] along attrs.ints[0]
// as a sum against a one-hot mask, so its gradient is plain autodiff.
var opTakeAlongAxis = &opDef{name: "take_along_axis", replay: func(_ *replayContext, n *node, in []*graph.Node) *graph.Node {
	x, idx := in[0], in[1]
	axis := n.attrs.ints[0]
	classes := x.Shape().Dimensions[axis]
	outDims := n.shape.Dimensions
	// mask[..., j, c, ...] = (idx[..., j, ...] == c)
	maskDims := slices.Insert(slices.Clone(outDims), axis+1, classes)
	idxExpanded := graph.Reshape(idx, slices.Insert(slices.Clone(outDims), axis+1, 1)...)
	classIDs := graph.Iota(x.Graph(), shapeOf(idx.DType(), maskDims...), axis+1)
	mask := graph.Equal(broadcastTo(idxExpanded, maskDims), classIDs)
	xExpanded := broadcastTo(graph.Reshape(x, slices.Insert(slices.Clone(x.Shape().Dimensions), axis, 1)...), maskDims)
	picked := graph.Where(mask, xExpanded, graph.ZerosLike(xExpanded))
	return graph.ReduceSum(picked, axis+1)
}}

// TakeAlongAxis gathers t's values at integer indices along axis, like
// torch.gather(t, axis, indices): indices has t's rank and dimensions except
// along axis; out[..., j, ...] = t[..., indices[..., j, ...], ...]. An index
// outside [0, size) yields 0. Typical use: picking each row's label score.
func (t *Tensor) TakeAlongAxis(indices *Tensor, axis int) *Tensor {
	const op = "TakeAlongAxis"
	if bad := precheck(op, t, indices); bad != nil {
		return bad
	}
	if indices.DType() != Int32 && indices.DType() != Int64 {
		return t.dev.failed(t.shape, opError(op, "indices are %s, want Int32 or Int64", indices.shape))
	}
	ax, err := normalizeAxis(op, axis, t.Rank())
	if err != nil {
		return t.dev.failed(t.shape, err)
	}
	if indices.Rank() != t.Rank() {
		return t.dev.failed(t.shape, opError(op, "indices %s must have the rank of %s", indices.shape, t.shape))
	}
	for i, d := range indices.Dims() {
		if i != ax && d != t.Dims()[i] {
			return t.dev.failed(t.shape, opError(op, "indices %s and values %s differ outside axis %d", indices.shape, t.shape, ax))
		}
	}
	return record(opTakeAlongAxis, attrs{ints: []int{ax}}, shapeOf(t.DType(), indices.Dims()...), t, indices)
}

// Conv2dOptions configure Conv2d like torch.nn.functional.conv2d. Zero
// Stride and Dilation mean 1; zero Groups means 1.
type Conv2dOptions struct {
	Stride, Padding, Dilation [2]int
	Groups                    int
}

func (o Conv2dOptions) normalized() Conv2dOptions {
	for i := range 2 {
		o.Stride[i] = max(o.Stride[i], 1)
		o.Dilation[i] = max(o.Dilation[i], 1)
	}
	o.Groups = max(o.Groups, 1)
	return o
}

// channelsLastLayout is NHWC input, HWIO kernel, NHWC output: the layout
// XLA's CPU convolutions run in (channels_last.go).
var channelsLastLayout = compute.ConvolveAxesConfig{
	InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
	KernelOutputChannels: 3, KernelInputChannels: 2, KernelSpatial: []int{0, 1},
	OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2},
}

// opConv2d: attrs.ints are stride h,w, padding h,w, dilation h,w, groups.
// It runs channels-last (channels_last.go): the input's NHWC form, the
// kernel transposed from OIHW to HWIO, an NHWC result.
//
// Two GoMLX v0.26.0 convolution-gradient bugs are worked around here, each
// by an exact rewrite whose gradient is plain slicing:
//   - even kernel sizes give input gradients shifted by one element: the
//     kernel gets one zero tap appended (and the input `dilation` zeros at
//     the end), so the output is unchanged and the kernel is odd;
//   - padding that reaches the kernel size fails to build
//     ("outputDimStart ... out-of-bounds") and Pad has no gradient: the
//     input is padded by concatenating zeros before an unpadded convolution;
//   - stride and dilation together are refused: the convolution runs with
//     stride 1 and every stride-th output is sliced out.
var opConv2d = &opDef{name: "conv2d", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	a := n.attrs.ints
	x, kernel := rc.nhwc(in[0]), graph.TransposeAllAxes(in[1], toHWIO...)
	dilation := [2]int{a[4], a[5]}
	for i := range 2 {
		if kernel.Shape().Dimensions[i]%2 == 0 {
			kernel = appendZeros(kernel, i, 1)
			x = appendZeros(x, 1+i, dilation[i])
		}
	}
	padding := [][2]int{{a[2], a[2]}, {a[3], a[3]}}
	if a[2] >= kernel.Shape().Dimensions[0] || a[3] >= kernel.Shape().Dimensions[1] {
		x = zeroPad(zeroPad(x, 1, a[2]), 2, a[3])
		padding = [][2]int{{0, 0}, {0, 0}}
	}
	stride := [2]int{a[0], a[1]}
	sliceAfter := stride != [2]int{1, 1} && dilation != [2]int{1, 1}
	if sliceAfter {
		stride = [2]int{1, 1}
	}
	out := graph.Convolve(x, kernel).AxesConfig(channelsLastLayout).
		StridePerAxis(stride[0], stride[1]).
		PaddingPerDim(padding).
		DilationPerAxis(dilation[0], dilation[1]).
		ChannelGroupCount(a[6]).
		Done()
	if sliceAfter {
		hOut, wOut := n.shape.Dimensions[2], n.shape.Dimensions[3]
		out = graph.Slice(out, graph.AxisRange(),
			graph.AxisRange(0, (hOut-1)*a[0]+1).Stride(a[0]),
			graph.AxisRange(0, (wOut-1)*a[1]+1).Stride(a[1]), graph.AxisRange())
	}
	return rc.fromNHWC(out)
}}

// zerosLikeAxis returns zeros shaped like x but with size p along axis.
func zerosLikeAxis(x *graph.Node, axis, p int) *graph.Node {
	dims := slices.Clone(x.Shape().Dimensions)
	dims[axis] = p
	return graph.Zeros(x.Graph(), shapeOf(x.DType(), dims...))
}

// zeroPad adds p zeros on both sides of axis.
func zeroPad(x *graph.Node, axis, p int) *graph.Node {
	if p == 0 {
		return x
	}
	zeros := zerosLikeAxis(x, axis, p)
	return graph.Concatenate([]*graph.Node{zeros, x, zeros}, axis)
}

// appendZeros adds p zeros at the end of axis.
func appendZeros(x *graph.Node, axis, p int) *graph.Node {
	return graph.Concatenate([]*graph.Node{x, zerosLikeAxis(x, axis, p)}, axis)
}

// Conv2d convolves x [N, C, H, W] with weight [O, C/groups, kH, kW] as
// torch does (cross-correlation, zero padding), giving [N, O, H', W'].
func Conv2d(x, weight *Tensor, opts Conv2dOptions) *Tensor {
	const op = "Conv2d"
	if bad := precheck(op, x, weight); bad != nil {
		return bad
	}
	o := opts.normalized()
	xs, ws := x.shape, weight.shape
	fail := func(format string, args ...any) *Tensor { return x.dev.failed(xs, opError(op, format, args...)) }
	switch {
	case xs.DType != ws.DType:
		return fail("input %s and weight %s differ in dtype", xs, ws)
	case xs.Rank() != 4 || ws.Rank() != 4:
		return fail("needs input [N, C, H, W] and weight [O, C/groups, kH, kW], got %s and %s", xs, ws)
	case xs.Dimensions[1]%o.Groups != 0 || ws.Dimensions[0]%o.Groups != 0:
		return fail("channels in %d and out %d must be divisible by groups %d", xs.Dimensions[1], ws.Dimensions[0], o.Groups)
	case ws.Dimensions[1] != xs.Dimensions[1]/o.Groups:
		return fail("weight %s expects %d input channels per group, input %s has %d/%d",
			ws, ws.Dimensions[1], xs, xs.Dimensions[1], o.Groups)
	case o.Padding[0] < 0 || o.Padding[1] < 0:
		return fail("negative padding %v", o.Padding)
	}
	out := []int{xs.Dimensions[0], ws.Dimensions[0], 0, 0}
	for i := range 2 {
		span := o.Dilation[i]*(ws.Dimensions[2+i]-1) + 1
		size := xs.Dimensions[2+i] + 2*o.Padding[i] - span
		if size < 0 {
			return fail("kernel %s (dilation %v) larger than padded input %s", ws, o.Dilation, xs)
		}
		out[2+i] = size/o.Stride[i] + 1
	}
	a := attrs{ints: []int{o.Stride[0], o.Stride[1], o.Padding[0], o.Padding[1], o.Dilation[0], o.Dilation[1], o.Groups}}
	return record(opConv2d, a, shapeOf(xs.DType, out...), x, weight)
}

// attrs.ints: kernel h,w, stride h,w, padding h,w; attrs.str: max or avg.
var opPool2d = &opDef{name: "pool2d", replay: func(rc *replayContext, n *node, in []*graph.Node) *graph.Node {
	a := n.attrs.ints
	if n.attrs.str == "max" {
		return rc.maxPool2d(in[0], poolWindow{kernel: [2]int{a[0], a[1]}, stride: [2]int{a[2], a[3]}, padding: [2]int{a[4], a[5]}, spatial: [2]int{2, 3}})
	}
	out := graph.SumPool(in[0]).ChannelsAxis(images.ChannelsFirst).WindowPerAxis(a[0], a[1]).StridePerAxis(a[2], a[3]).
		PaddingPerDim([][2]int{{a[4], a[4]}, {a[5], a[5]}}).Done()
	// torch's default count_include_pad=True: padding counts in the divisor.
	return graph.DivScalar(out, float64(a[0]*a[1]))
}}

// Pool2dOptions configure MaxPool2d and AvgPool2d like torch's. Zero
// Stride means the kernel size.
type Pool2dOptions struct {
	Kernel, Stride, Padding [2]int
}

func pool2d(kind string, x *Tensor, opts Pool2dOptions) *Tensor {
	name := map[string]string{"max": "MaxPool2d", "avg": "AvgPool2d"}[kind]
	if bad := precheck(name, x); bad != nil {
		return bad
	}
	xs := x.shape
	fail := func(format string, args ...any) *Tensor { return x.dev.failed(xs, opError(name, format, args...)) }
	if xs.Rank() != 4 || !xs.DType.IsFloat() {
		return fail("needs a float input [N, C, H, W], got %s", xs)
	}
	o := opts
	out := []int{xs.Dimensions[0], xs.Dimensions[1], 0, 0}
	for i := range 2 {
		if o.Kernel[i] < 1 {
			return fail("kernel %v must be positive", o.Kernel)
		}
		if o.Stride[i] == 0 {
			o.Stride[i] = o.Kernel[i]
		}
		if o.Padding[i] < 0 || 2*o.Padding[i] > o.Kernel[i] {
			return fail("padding %v must be from 0 to half the kernel %v", o.Padding, o.Kernel)
		}
		size := xs.Dimensions[2+i] + 2*o.Padding[i] - o.Kernel[i]
		if size < 0 || o.Stride[i] < 1 {
			return fail("kernel %v, stride %v do not fit input %s", o.Kernel, o.Stride, xs)
		}
		out[2+i] = size/o.Stride[i] + 1
	}
	a := attrs{str: kind, ints: []int{o.Kernel[0], o.Kernel[1], o.Stride[0], o.Stride[1], o.Padding[0], o.Padding[1]}}
	return record(opPool2d, a, shapeOf(xs.DType, out...), x)
}

// MaxPool2d takes the maximum over each window of x [N, C, H, W]; padding
// never wins (as torch pads with -inf).
func MaxPool2d(x *Tensor, opts Pool2dOptions) *Tensor { return pool2d("max", x, opts) }

// AvgPool2d averages each window of x [N, C, H, W], counting padding as
// zeros in the divisor (torch's count_include_pad=True).
func AvgPool2d(x *Tensor, opts Pool2dOptions) *Tensor { return pool2d("avg", x, opts) }
