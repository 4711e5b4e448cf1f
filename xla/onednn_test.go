package xla

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla/internal/reference"
)

// requireOneDNN fails the test unless kernels is oneDNN; it skips only
// where oneDNN is not installed and installing it needs root (as make
// deps' other apt packages), so a root CI machine never skips.
func requireOneDNN(t *testing.T, kernels string) {
	t.Helper()
	if strings.HasPrefix(kernels, "onednn ") {
		return
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libdnnl.so.2"); err != nil && os.Geteuid() != 0 {
		t.Skipf("oneDNN is missing and installing it needs root (sudo apt-get install libdnnl2): convolutions run in %s", kernels)
	}
	t.Fatalf("the CPU target's convolutions run in %s, not oneDNN: make deps installs libdnnl2", kernels)
}

// TestConvolutionsRunThroughOneDNN: where oneDNN loads (make deps
// installs Debian's libdnnl2), the CPU target's convolutions at
// ResNet-18's geometries (the 7x7 stride-2 stem, 3x3 at strides 1 and 2,
// the 1x1 stride-2 downsample) and with channels enough for oneDNN's
// blocked AVX-512 kernels run in oneDNN inside the compiled program, each
// pass counted, and match the float64 reference: the forward pass, and
// both gradients of sum(y·r) against its exact vector-Jacobian product.
func TestConvolutionsRunThroughOneDNN(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	requireOneDNN(t, d.engine.Backend().Kernels())
	ctx := testContext(t)
	rng := rand.New(rand.NewPCG(45, 1))
	random := func(dims ...int) (reference.Tensor, *Tensor) {
		h := reference.New(dims...)
		f32 := make([]float32, len(h.V))
		for i := range f32 {
			f32[i] = float32(rng.NormFloat64())
			h.V[i] = float64(f32[i])
		}
		return h, mustFromSlice(t, d, f32, dims...)
	}
	near := func(what string, want reference.Tensor, got *Tensor) {
		t.Helper()
		v, err := got.Float32s(ctx)
		require.NoError(t, err)
		require.Len(t, v, len(want.V))
		var scale float64
		for _, w := range want.V {
			scale = math.Max(scale, math.Abs(w))
		}
		for i := range v {
			// Sums of a few hundred float32 products: 1e-5 of the
			// largest value, and a ulp-sized floor.
			require.InDelta(t, want.V[i], float64(v[i]), 1e-5*scale+1e-6, "%s[%d]", what, i)
		}
	}
	for _, tc := range []struct {
		name string
		x, w []int
		o    Conv2dOptions
	}{
		{"stem 7x7 stride 2 padding 3", []int{2, 3, 32, 32}, []int{64, 3, 7, 7}, Conv2dOptions{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}},
		{"3x3 stride 1 padding 1", []int{2, 64, 8, 8}, []int{64, 64, 3, 3}, Conv2dOptions{Padding: [2]int{1, 1}}},
		{"3x3 stride 2 padding 1", []int{2, 64, 9, 9}, []int{128, 64, 3, 3}, Conv2dOptions{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
		{"1x1 stride 2 downsample", []int{2, 64, 8, 8}, []int{128, 64, 1, 1}, Conv2dOptions{Stride: [2]int{2, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := backend.OneDNNCalls()
			xh, x := random(tc.x...)
			wh, w := random(tc.w...)
			require.NoError(t, x.SetRequiresGrad(true))
			require.NoError(t, w.SetRequiresGrad(true))
			y := Conv2d(x, w, tc.o)
			want := reference.Conv2d(xh, wh, convParams(tc.o))
			rh, r := random(want.Dims...)
			require.NoError(t, y.Mul(r).Sum().Backward())
			near("y", want, y)
			dx, dw := reference.Conv2dVJP(xh, wh, rh, convParams(tc.o))
			near("dx", dx, x.Grad())
			near("dw", dw, w.Grad())
			after := backend.OneDNNCalls()
			assert.Positive(t, after.Forward.Calls-before.Forward.Calls, "the forward pass ran in oneDNN")
			assert.Positive(t, after.InputGrad.Calls-before.InputGrad.Calls, "the input gradient ran in oneDNN")
			assert.Positive(t, after.WeightGrad.Calls-before.WeightGrad.Calls, "the weight gradient ran in oneDNN")
		})
	}
}
