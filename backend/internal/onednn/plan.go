package onednn

import "fmt"

// The custom-call targets of the three convolution passes.
const (
	TargetForward    = "xladdp_onednn_conv_forward"
	TargetInputGrad  = "xladdp_onednn_conv_input_grad"
	TargetWeightGrad = "xladdp_onednn_conv_weight_grad"
)

// The passes' dimension numbers, as StableHLO writes them: what input,
// kernel and output each axis of the operands is (b batch, f feature, i
// and o the kernel's input and output features, 0 and 1 the spatial
// axes), in the channels-last layout the engine builds.
const (
	ForwardLayout    = "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]"
	InputGradLayout  = "[b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f]"
	WeightGradLayout = "[f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f]"
)

// Convolution is a 2-D convolution as XLA is asked for it.
type Convolution struct {
	Layout                string
	Float32               bool
	Input, Kernel, Output [4]int64
	Strides               [2]int64
	InputDilation         [2]int64
	KernelDilation        [2]int64
	Low, High             [2]int64
	Groups, BatchGroups   int
	// KernelReversed: the kernel is another value reversed over its two
	// spatial axes, as the input gradient of a convolution is built.
	KernelReversed bool
}

// Call is the custom call running a convolution: its target, whether it
// takes the kernel before its reversal, and the forward convolution's
// geometry, which every pass is given.
type Call struct {
	Target            string
	KernelUnreversed  bool
	Stride, Low, High [2]int64
}

// Config is the call's attribute dictionary (its backend_config).
func (c Call) Config() string {
	return fmt.Sprintf("{pad_hi = %s, pad_lo = %s, stride = %s}", arrayI64(c.High), arrayI64(c.Low), arrayI64(c.Stride))
}

// Plan is the custom call that runs c through oneDNN: a forward pass, an
// input gradient or a weight gradient of a plain convolution (f32,
// channels-last, one group, no dilation of the forward); false leaves c
// to XLA. The input gradient XLA computes from the spatially reversed
// kernel; its call takes the kernel itself.
func Plan(c Convolution) (Call, bool) {
	if !c.Float32 || c.Groups != 1 || c.BatchGroups != 1 {
		return Call{}, false
	}
	f, ok := c.forward()
	if !ok || !c.fits(&f) {
		return Call{}, false
	}
	return f, true
}

// forward is the forward convolution behind c; false where oneDNN does
// not run c.
func (c Convolution) forward() (Call, bool) {
	one := [2]int64{1, 1}
	var f Call
	switch c.Layout {
	case ForwardLayout:
		// x NHWC, w HWIO -> y NHWC.
		if c.InputDilation != one || c.KernelDilation != one {
			return f, false
		}
		f.Target, f.Stride, f.Low, f.High = TargetForward, c.Strides, c.Low, c.High
	case InputGradLayout:
		// dy NHWC, reverse(w) HWIO -> dx NHWC: the forward's stride is
		// the dilation of dy, its low padding k-1-lo.
		if !c.KernelReversed || c.KernelDilation != one || c.Strides != one {
			return f, false
		}
		f.Target, f.KernelUnreversed, f.Stride = TargetInputGrad, true, c.InputDilation
		for a := range 2 {
			k, h, oh := c.Kernel[a], c.Output[1+a], c.Input[1+a]
			f.Low[a] = k - 1 - c.Low[a]
			f.High[a] = (oh-1)*f.Stride[a] + k - h - f.Low[a]
		}
	case WeightGradLayout:
		// x NHWC, dy NHWC -> dw HWIO: the forward's stride is the
		// dilation of dy.
		if c.InputDilation != one || c.Strides != one {
			return f, false
		}
		f.Target, f.Stride, f.Low = TargetWeightGrad, c.KernelDilation, c.Low
		for a := range 2 {
			k, h, oh := c.Output[a], c.Input[1+a], c.Kernel[1+a]
			f.High[a] = (oh-1)*f.Stride[a] + k - h - f.Low[a]
		}
	default:
		return f, false
	}
	return f, true
}

// fits reports whether f's geometry is the one oneDNN checks, from c's
// shapes: rows past the last window (a stride that does not divide the
// input) are read by no window, so a high padding below 0 is 0 there,
// which fits sets in f.
func (c Convolution) fits(f *Call) bool {
	x, y, k := c.Input, c.Output, c.Kernel[:2]
	switch f.Target {
	case TargetInputGrad:
		x, y = c.Output, c.Input
	case TargetWeightGrad:
		y, k = c.Kernel, c.Output[:2]
	}
	for a := range 2 {
		f.High[a] = max(f.High[a], 0)
		if f.Stride[a] < 1 || f.Low[a] < 0 || (x[1+a]+f.Low[a]+f.High[a]-k[a])/f.Stride[a]+1 != y[1+a] {
			return false
		}
	}
	return true
}

func arrayI64(v [2]int64) string { return fmt.Sprintf("array<i64: %d, %d>", v[0], v[1]) }
