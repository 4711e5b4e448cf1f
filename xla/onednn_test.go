package xla

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla/internal/reference"
)

// TestConvolutionsRunThroughOneDNN: where oneDNN loads (make deps
// installs Debian's libdnnl2), the CPU target's convolutions at
// ResNet-18's geometries (the 7x7 stride-2 stem, 3x3 at strides 1 and 2,
// the 1x1 stride-2 downsample) run in oneDNN inside the compiled program,
// each pass counted, with channels enough for its blocked AVX-512
// kernels, and match the float64 reference and central differences as
// the op table does.
func TestConvolutionsRunThroughOneDNN(t *testing.T) {
	kernels := newEngine(t, 1).Backend().Kernels()
	if !strings.HasPrefix(kernels, "onednn ") {
		if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libdnnl.so.2"); err != nil && os.Geteuid() != 0 {
			t.Skipf("oneDNN is missing and installing it needs root (sudo apt-get install libdnnl2): convolutions run in %s", kernels)
		}
		t.Fatalf("the CPU target's convolutions run in %s, not oneDNN: make deps installs libdnnl2", kernels)
	}
	conv := func(name string, x, w []int, o Conv2dOptions) opCase {
		return opCase{name: name, inputs: [][]int{x, w},
			device: func(_ *Device, in []*Tensor) *Tensor { return Conv2d(in[0], in[1], o) },
			host:   func(in []reference.Tensor) reference.Tensor { return reference.Conv2d(in[0], in[1], convParams(o)) }}
	}
	cases := []opCase{
		conv("stem 7x7 stride 2 padding 3", []int{1, 3, 9, 9}, []int{16, 3, 7, 7}, Conv2dOptions{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}),
		conv("3x3 stride 1 padding 1", []int{1, 16, 5, 5}, []int{16, 16, 3, 3}, Conv2dOptions{Padding: [2]int{1, 1}}),
		conv("3x3 stride 2 padding 1", []int{1, 16, 6, 6}, []int{32, 16, 3, 3}, Conv2dOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}),
		conv("1x1 stride 2 downsample", []int{2, 16, 5, 5}, []int{32, 16, 1, 1}, Conv2dOptions{Stride: [2]int{2, 2}}),
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := backend.OneDNNCalls()
			runOpCase(t, tc, 40+i)
			after := backend.OneDNNCalls()
			assert.Positive(t, after.Forward-before.Forward, "the forward pass ran in oneDNN")
			assert.Positive(t, after.InputGrad-before.InputGrad, "the input gradient ran in oneDNN")
			assert.Positive(t, after.WeightGrad-before.WeightGrad, "the weight gradient ran in oneDNN")
		})
	}
}
