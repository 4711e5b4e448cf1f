package onednn

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

var one = [2]int64{1, 1}

// TestPlanTheThreePasses: ResNet-18's stride-2 3x3 convolution (32x32x64
// -> 16x16x128, padding 1) as GoMLX asks for its forward pass and the two
// gradients its VJP builds; the forward convolution's geometry (stride
// 2, padding 1 low, 0 high: (32+1+0-3)/2+1 = 16) comes back from every
// pass, and the input gradient's call takes the kernel unreversed.
func TestPlanTheThreePasses(t *testing.T) {
	x, w, y := [4]int64{32, 32, 32, 64}, [4]int64{3, 3, 64, 128}, [4]int64{32, 16, 16, 128}
	want := Call{Stride: [2]int64{2, 2}, Low: one, High: [2]int64{0, 0}}
	for _, tc := range []struct {
		name string
		conv Convolution
		call Call
	}{
		{"forward", Convolution{Layout: ForwardLayout, Float32: true, Input: x, Kernel: w, Output: y, Strides: [2]int64{2, 2},
			InputDilation: one, KernelDilation: one, Low: one, Groups: 1, BatchGroups: 1}, Call{Target: TargetForward}},
		// dx = conv(dilate(dy, 2), reverse(w)), padding k-1-lo = 1, and 2
		// high to make 32 rows.
		{"input gradient", Convolution{Layout: InputGradLayout, Float32: true, Input: y, Kernel: w, Output: x, Strides: one,
			InputDilation: [2]int64{2, 2}, KernelDilation: one, Low: one, High: [2]int64{2, 2}, Groups: 1, BatchGroups: 1, KernelReversed: true},
			Call{Target: TargetInputGrad, KernelUnreversed: true}},
		{"weight gradient", Convolution{Layout: WeightGradLayout, Float32: true, Input: x, Kernel: y, Output: w, Strides: one,
			InputDilation: one, KernelDilation: [2]int64{2, 2}, Low: one, Groups: 1, BatchGroups: 1}, Call{Target: TargetWeightGrad}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, ok := Plan(tc.conv)
			assert.True(t, ok)
			tc.call.Stride, tc.call.Low, tc.call.High = want.Stride, want.Low, want.High
			assert.Equal(t, tc.call, call)
			assert.Equal(t, "{pad_hi = array<i64: 0, 0>, pad_lo = array<i64: 1, 1>, stride = array<i64: 2, 2>}", call.Config())
		})
	}
}

// TestPlanStrideThatDoesNotDivide: a 1x1 stride-2 downsample of 8 rows
// reads rows 0, 2, 4, 6; row 7 is in no window. XLA's input gradient pads
// one row high to give it back (zero); oneDNN is given the forward
// geometry with no high padding, which makes the same 4 rows.
func TestPlanStrideThatDoesNotDivide(t *testing.T) {
	call, ok := Plan(Convolution{Layout: InputGradLayout, Float32: true, Input: [4]int64{2, 4, 4, 128}, Kernel: [4]int64{1, 1, 64, 128},
		Output: [4]int64{2, 8, 8, 64}, Strides: one, InputDilation: [2]int64{2, 2}, KernelDilation: one, High: one,
		Groups: 1, BatchGroups: 1, KernelReversed: true})
	assert.True(t, ok)
	assert.Equal(t, Call{Target: TargetInputGrad, KernelUnreversed: true, Stride: [2]int64{2, 2}}, call)
}

// TestPlanLeavesWhatOneDNNDoesNotRun: grouped, dilated, bf16 and NCHW
// convolutions, an input gradient whose kernel is not a spatial reverse,
// a padding that would be negative for the forward pass, and a strided
// weight gradient stay XLA's.
func TestPlanLeavesWhatOneDNNDoesNotRun(t *testing.T) {
	x, w := [4]int64{2, 8, 8, 4}, [4]int64{3, 3, 4, 4}
	plain := Convolution{Layout: ForwardLayout, Float32: true, Input: x, Kernel: w, Output: x, Strides: one,
		InputDilation: one, KernelDilation: one, Low: one, High: one, Groups: 1, BatchGroups: 1}
	_, ok := Plan(plain)
	assert.True(t, ok, "the convolution the cases below change runs in oneDNN")
	for _, tc := range []struct {
		name   string
		change func(c *Convolution)
	}{
		{"two groups", func(c *Convolution) { c.Groups, c.Kernel = 2, [4]int64{3, 3, 2, 4} }},
		{"two batch groups", func(c *Convolution) { c.BatchGroups = 2 }},
		{"dilated kernel", func(c *Convolution) { c.KernelDilation, c.Low, c.High = [2]int64{2, 2}, [2]int64{2, 2}, [2]int64{2, 2} }},
		{"bf16", func(c *Convolution) { c.Float32 = false }},
		{"NCHW", func(c *Convolution) { c.Layout = "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]" }},
		{"input gradient of an unreversed kernel", func(c *Convolution) { c.Layout = InputGradLayout }},
		{"input gradient padded past the kernel", func(c *Convolution) {
			c.Layout, c.KernelReversed, c.Input, c.Output = InputGradLayout, true, [4]int64{2, 10, 10, 4}, [4]int64{2, 14, 14, 4}
			c.Low, c.High = [2]int64{3, 3}, [2]int64{3, 3}
		}},
		{"weight gradient with a strided window", func(c *Convolution) { c.Layout, c.Strides = WeightGradLayout, [2]int64{2, 2} }},
		{"an output the window does not make", func(c *Convolution) { c.Output = [4]int64{2, 7, 8, 4} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := plain
			tc.change(&c)
			_, ok := Plan(c)
			assert.False(t, ok)
		})
	}
}
