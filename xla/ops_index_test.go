package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla/internal/reference"
)

// indexOpCases are the transformer's ops, checked like opCases: forward
// against the float64 host reference, gradients against central
// differences.
func indexOpCases() []opCase {
	withInts := func(d *Device, x *Tensor, vals []int32, dims []int, f func(idx *Tensor) *Tensor) *Tensor {
		idx, err := FromSlice(d, vals, dims...)
		if err != nil {
			return d.failed(x.shape, err)
		}
		return f(idx)
	}
	causal := func(d *Device, n int) *Tensor { return d.Ones(Float32, n, n).Tril(0).Greater(d.Zeros(Float32)) }
	maskedHost := func(h reference.Tensor) reference.Tensor {
		m := reference.Tril(h.Map(func(float64) float64 { return 1 }), 0)
		out := reference.New(h.Dims...)
		for i := range h.V {
			out.V[i] = h.V[i]
			if m.V[i] == 0 {
				out.V[i] = math.Inf(-1)
			}
		}
		return out
	}
	return []opCase{
		{name: "IndexSelect rows with repeats", inputs: [][]int{{5, 3}},
			device: func(d *Device, x []*Tensor) *Tensor {
				return withInts(d, x[0], []int32{4, 0, 4, 2, 4}, []int{5}, func(idx *Tensor) *Tensor { return x[0].IndexSelect(0, idx) })
			},
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.IndexSelect(x[0], 0, []int{4, 0, 4, 2, 4})
			}},
		{name: "IndexSelect middle axis int64", inputs: [][]int{{2, 4, 3}},
			device: func(d *Device, x []*Tensor) *Tensor {
				idx, err := FromSlice(d, []int64{3, 1, 1}, 3)
				if err != nil {
					return d.failed(x[0].shape, err)
				}
				return x[0].IndexSelect(1, idx)
			},
			host: func(x []reference.Tensor) reference.Tensor { return reference.IndexSelect(x[0], 1, []int{3, 1, 1}) }},
		{name: "Tril", inputs: [][]int{{2, 3, 4}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Tril(0) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Tril(x[0], 0) }},
		{name: "Tril below and above", inputs: [][]int{{4, 3}, {4, 3}},
			device: func(_ *Device, x []*Tensor) *Tensor { return x[0].Tril(-1).Add(x[1].Tril(1)) },
			host: func(x []reference.Tensor) reference.Tensor {
				return reference.ZipWith(reference.Tril(x[0], -1), reference.Tril(x[1], 1), func(a, b float64) float64 { return a + b })
			}},
		{name: "MaskedSoftmax causal", inputs: [][]int{{2, 4, 4}},
			device: func(d *Device, x []*Tensor) *Tensor { return x[0].MaskedSoftmax(causal(d, 4), -1) },
			host:   func(x []reference.Tensor) reference.Tensor { return reference.Softmax(maskedHost(x[0]), 2, false) }},
		{name: "MaskedFill", inputs: [][]int{{3, 3}},
			device: func(d *Device, x []*Tensor) *Tensor { return x[0].MaskedFill(causal(d, 3), 0.5) },
			host: func(x []reference.Tensor) reference.Tensor {
				out := reference.New(3, 3)
				for i, v := range x[0].V {
					out.V[i] = v
					if i%3 <= i/3 {
						out.V[i] = 0.5
					}
				}
				return out
			}},
	}
}

func TestIndexOpsAgainstFloat64Reference(t *testing.T) {
	for ci, tc := range indexOpCases() {
		t.Run(tc.name, func(t *testing.T) { runOpCase(t, tc, 1000+ci) })
	}
}

func TestIndexOpsRefuseBadInput(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	x := d.Zeros(Float32, 4, 3)
	ints := func(vals []int32, dims ...int) *Tensor {
		idx, err := FromSlice(d, vals, dims...)
		require.NoError(t, err)
		return idx
	}
	for _, tc := range []struct {
		name string
		got  *Tensor
		want string
	}{
		{"float indices", x.IndexSelect(0, d.Zeros(Float32, 2)), "want Int32 or Int64"},
		{"2-D indices", x.IndexSelect(0, ints([]int32{0, 1}, 1, 2)), "must be 1-D"},
		{"axis out of range", x.IndexSelect(2, ints([]int32{0}, 1)), "axis"},
		{"select from empty axis", d.Zeros(Float32, 0, 3).IndexSelect(0, ints([]int32{0}, 1)), "empty"},
		{"tril of a vector", d.Zeros(Float32, 3).Tril(0), "rank >= 2"},
		{"float mask", x.MaskedSoftmax(x, -1), "want Bool"},
		{"mask wider than the values", x.MaskedFill(d.Zeros(Float32, 2, 4, 3).Greater(d.Zeros(Float32)), 1), "broadcast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.got.Err())
			assert.Contains(t, tc.got.Err().Error(), tc.want)
		})
	}
}

// TestIndexOpEdges: what XLA does where torch raises or returns NaN.
func TestIndexOpEdges(t *testing.T) {
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	x := mustFromSlice(t, d, []float32{1, 2, 3, 4, 5, 6}, 3, 2)
	idx, err := FromSlice(d, []int32{-1, 7, 1}, 3)
	require.NoError(t, err)
	got, err := x.IndexSelect(0, idx).Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 5, 6, 3, 4}, got, "out-of-range indices clamp")

	empty, err := FromSlice(d, []int32{}, 0)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2}, x.IndexSelect(0, empty).Dims())

	none := d.Zeros(Float32, 2, 3).Greater(d.Ones(Float32))
	probs, err := x.Reshape(2, 3).MaskedSoftmax(none, -1).Float32s(ctx)
	require.NoError(t, err)
	for _, p := range probs {
		assert.True(t, math.IsNaN(float64(p)), "a row with nothing kept is NaN, as torch: %v", probs)
	}
	full, err := x.Tril(5).Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3, 4, 5, 6}, full)
	zero, err := x.Tril(-9).Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, make([]float32, 6), zero)
}
