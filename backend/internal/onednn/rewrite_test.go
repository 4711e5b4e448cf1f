package onednn

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conv prints a convolution as GoMLX v0.26.0 does.
func conv(result, lhs, rhs, dims, lhsDil, rhsDil, pad, strides, types string, groups int) string {
	return fmt.Sprintf(`    %s = "stablehlo.convolution"(%s, %s) {
      batch_group_count = 1 : i64,
      dimension_numbers = #stablehlo.conv<%s>,
      feature_group_count = %d : i64,
      lhs_dilation = array<i64: %s>,
      padding = dense<%s> : tensor<2x2xi64>,
      precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>],
      rhs_dilation = array<i64: %s>,
      window_reversal = array<i1: false, false>,
      window_strides = array<i64: %s>
    } : %s`, result, lhs, rhs, dims, groups, lhsDil, pad, rhsDil, strides, types)
}

const reversedKernel = `    %106 = "stablehlo.reverse"(%1) { dimensions = array<i64: 0, 1> } : (tensor<3x3x64x128xf32>) -> tensor<3x3x64x128xf32>`

// TestRewriteTurnsTheThreePassesIntoCustomCalls: ResNet-18's stride-2
// 3x3 convolution (32x32x64 -> 16x16x128, padding 1) as GoMLX prints its
// forward pass and the two gradients its VJP builds, and what each
// becomes; the forward convolution's geometry (stride 2, padding 1 low,
// 0 high: (32+1+0-3)/2+1 = 16) comes back from every pass.
func TestRewriteTurnsTheThreePassesIntoCustomCalls(t *testing.T) {
	const call = `    %s = "stablehlo.custom_call"(%s, %s) {api_version = 4 : i32, backend_config = {pad_hi = array<i64: 0, 0>, pad_lo = array<i64: 1, 1>, stride = array<i64: 2, 2>}, call_target_name = "%s"} : %s`
	x, w, y := "tensor<32x32x32x64xf32>", "tensor<3x3x64x128xf32>", "tensor<32x16x16x128xf32>"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"forward", conv("%2", "%0", "%1", forwardDims, "1, 1", "1, 1", "[[1, 0], [1, 0]]", "2, 2", "("+x+", "+w+") -> "+y, 1),
			fmt.Sprintf(call, "%2", "%0", "%1", TargetForward, "("+x+", "+w+") -> "+y)},
		// dx = conv(dilate(dy, 2), reverse(w)), padding k-1-lo = 1, and
		// 2 high to make 32 rows; the call takes w itself.
		{"input gradient", reversedKernel + "\n" + conv("%107", "%99", "%106", inputGradDims, "2, 2", "1, 1", "[[1, 2], [1, 2]]", "1, 1", "("+y+", "+w+") -> "+x, 1),
			reversedKernel + "\n" + fmt.Sprintf(call, "%107", "%99", "%1", TargetInputGrad, "("+y+", "+w+") -> "+x)},
		{"weight gradient", conv("%108", "%0", "%99", weightGradDims, "1, 1", "2, 2", "[[1, 0], [1, 0]]", "1, 1", "("+x+", "+y+") -> "+w, 1),
			fmt.Sprintf(call, "%108", "%0", "%99", TargetWeightGrad, "("+x+", "+y+") -> "+w)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			program := "module @m {\n" + tc.in + "\n}"
			out, n := Rewrite([]byte(program))
			assert.Equal(t, 1, n.Total())
			assert.Equal(t, "module @m {\n"+tc.want+"\n}", string(out))
		})
	}
}

// TestRewriteLeavesWhatOneDNNDoesNotRun: grouped, dilated, bf16 and
// 3-D convolutions, an input gradient whose kernel is not a spatial
// reverse, a padding that would be negative for the forward pass, and a
// layout of another order stay XLA's, byte for byte.
// TestRewriteStrideThatDoesNotDivide: a 1x1 stride-2 downsample of 8
// rows reads rows 0, 2, 4, 6; row 7 is in no window. XLA's input
// gradient pads one row high to give it back (zero); oneDNN is given the
// forward geometry with no high padding, which makes the same 4 rows.
func TestRewriteStrideThatDoesNotDivide(t *testing.T) {
	dy, w, dx := "tensor<2x4x4x128xf32>", "tensor<1x1x64x128xf32>", "tensor<2x8x8x64xf32>"
	rev := `    %106 = "stablehlo.reverse"(%1) { dimensions = array<i64: 0, 1> } : (tensor<1x1x64x128xf32>) -> tensor<1x1x64x128xf32>`
	out, n := Rewrite([]byte(rev + "\n" + conv("%107", "%99", "%106", inputGradDims, "2, 2", "1, 1", "[[0, 1], [0, 1]]", "1, 1", "("+dy+", "+w+") -> "+dx, 1)))
	assert.Equal(t, 1, n.InputGrad)
	assert.Contains(t, string(out), "pad_hi = array<i64: 0, 0>, pad_lo = array<i64: 0, 0>, stride = array<i64: 2, 2>")
}

func TestRewriteLeavesWhatOneDNNDoesNotRun(t *testing.T) {
	x, w, y := "tensor<2x8x8x4xf32>", "tensor<3x3x4x4xf32>", "tensor<2x8x8x4xf32>"
	types := "(" + x + ", " + w + ") -> " + y
	for _, tc := range []struct{ name, program string }{
		{"two groups", conv("%2", "%0", "%1", forwardDims, "1, 1", "1, 1", "[[1, 1], [1, 1]]", "1, 1", "(tensor<2x8x8x4xf32>, tensor<3x3x2x4xf32>) -> "+y, 2)},
		{"dilated kernel", conv("%2", "%0", "%1", forwardDims, "1, 1", "2, 2", "[[2, 2], [2, 2]]", "1, 1", types, 1)},
		{"bf16", conv("%2", "%0", "%1", forwardDims, "1, 1", "1, 1", "[[1, 1], [1, 1]]", "1, 1", strings.ReplaceAll(types, "f32", "bf16"), 1)},
		{"NCHW", conv("%2", "%0", "%1", "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]", "1, 1", "1, 1", "[[1, 1], [1, 1]]", "1, 1", types, 1)},
		{"input gradient of an unreversed kernel", conv("%7", "%9", "%1", inputGradDims, "1, 1", "1, 1", "[[1, 1], [1, 1]]", "1, 1", types, 1)},
		{"input gradient padded past the kernel", reversedKernel + "\n" + conv("%107", "%99", "%106", inputGradDims, "1, 1", "1, 1", "[[3, 3], [3, 3]]", "1, 1",
			"(tensor<2x10x10x4xf32>, tensor<3x3x64x128xf32>) -> tensor<2x14x14x4xf32>", 1)},
		{"weight gradient with a strided window", conv("%108", "%0", "%99", weightGradDims, "1, 1", "1, 1", "[[1, 1], [1, 1]]", "2, 2", types, 1)},
		{"no program", "module @m {\n}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, n := Rewrite([]byte(tc.program))
			assert.Zero(t, n.Total())
			assert.Equal(t, tc.program, string(out))
		})
	}
}

// TestRewriteKeepsTheRestOfTheProgram: two convolutions among other ops;
// only they change, and a truncated convolution (a program cut short)
// is left alone.
func TestRewriteKeepsTheRestOfTheProgram(t *testing.T) {
	x, w := "tensor<2x8x8x4xf32>", "tensor<3x3x4x4xf32>"
	types := "(" + x + ", " + w + ") -> " + x
	program := strings.Join([]string{
		"module @m {",
		`    %0 = "stablehlo.transpose"(%p0) { permutation = array<i64: 0, 2, 3, 1> } : (tensor<2x4x8x8xf32>) -> tensor<2x8x8x4xf32>`,
		conv("%2", "%0", "%1", forwardDims, "1, 1", "1, 1", "[[1, 1], [1, 1]]", "1, 1", types, 1),
		conv("%3", "%2", "%1", forwardDims, "1, 1", "1, 1", "[[1, 1], [1, 1]]", "1, 1", types, 1),
		`    "stablehlo.return"(%3) : (tensor<2x8x8x4xf32>) -> ()`,
		"}",
	}, "\n")
	out, n := Rewrite([]byte(program))
	assert.Equal(t, Rewritten{Forward: 2}, n)
	lines := strings.Split(string(out), "\n")
	require.Len(t, lines, 6)
	assert.Contains(t, lines[2], `"stablehlo.custom_call"(%0, %1)`)
	assert.Contains(t, lines[3], `%3 = "stablehlo.custom_call"(%2, %1)`)
	in := strings.Split(program, "\n")
	assert.Equal(t, in[1], lines[1])
	assert.Equal(t, in[len(in)-2], lines[4])

	cut := program[:strings.Index(program, "    } :")]
	out, n = Rewrite([]byte(cut))
	assert.Zero(t, n.Total())
	assert.Equal(t, cut, string(out))
}
