package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadShapesAreRecordTimeErrors: every constructor and shape op given a
// negative dimension or a size no device holds returns an error naming the
// op and the dimensions, at record time; nothing panics and nothing reaches
// the plugin (which used to abort the process on such shapes).
func TestBadShapesAreRecordTimeErrors(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	const big = 1 << 32
	v := func() *Tensor { return mustFromSlice(t, d, []float32{1, 2, 3, 4}, 4) }
	fromSlice := func(dims ...int) func() error {
		return func() error { _, err := FromSlice(d, []float32{}, dims...); return err }
	}
	fromBytes := func(dims ...int) func() error {
		return func() error { _, err := FromBytes(d, Float32, dims, nil); return err }
	}
	tensorErr := func(f func() *Tensor) func() error { return func() error { return f().Err() } }
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"FromSlice negative", fromSlice(-1, 0), "xla: FromSlice: negative dimension -1 at axis 0 of [-1 0]"},
		{"FromSlice overflow", fromSlice(big, big, 3), "xla: FromSlice: shape [4294967296 4294967296 3] of Float32 is larger than 1 TiB"},
		{"FromSlice int64 wrap", fromSlice(1<<62, 4), "larger than 1 TiB"},
		{"FromBytes negative", fromBytes(2, -3), "xla: FromBytes: negative dimension -3 at axis 1"},
		{"FromBytes overflow", fromBytes(big, big), "xla: FromBytes: shape [4294967296 4294967296]"},
		{"Zeros negative", tensorErr(func() *Tensor { return d.Zeros(Float32, 3, -1) }), "xla: Zeros: negative dimension -1 at axis 1 of [3 -1]"},
		{"Ones overflow", tensorErr(func() *Tensor { return d.Ones(Float64, big, big) }), "xla: Ones: shape [4294967296 4294967296] of Float64"},
		{"Full negative", tensorErr(func() *Tensor { return d.Full(2.5, Float32, -2) }), "xla: Full: negative dimension -2"},
		{"Full overflow", tensorErr(func() *Tensor { return d.Full(2.5, Float32, big, big) }), "xla: Full: shape"},
		{"Arange negative", tensorErr(func() *Tensor { return d.Arange(-5, Int32) }), "xla: Arange: negative dimension -5"},
		{"Arange overflow", tensorErr(func() *Tensor { return d.Arange(math.MaxInt, Int64) }), "xla: Arange: shape"},
		{"RandN negative", tensorErr(func() *Tensor { return d.RandN(Float32, 2, -2) }), "xla: Rand: negative dimension -2"},
		{"RandU overflow", tensorErr(func() *Tensor { return d.RandU(Float32, big, big) }), "xla: Rand: shape"},
		{"Reshape negative", tensorErr(func() *Tensor { return v().Reshape(-4, -1) }), "xla: Reshape: negative dimension in [-4 -1]"},
		{"Reshape overflow to the same count", tensorErr(func() *Tensor { return v().Reshape(1<<33, 1<<33, 4) }), "xla: Reshape: [8589934592 8589934592 4] has more elements than any tensor"},
		{"BroadcastTo negative", tensorErr(func() *Tensor { return v().BroadcastTo(-1, 4) }), "xla: BroadcastTo: negative dimension -1"},
		{"BroadcastTo overflow", tensorErr(func() *Tensor { return v().BroadcastTo(big, big, 4) }), "xla: BroadcastTo: shape"},
		{"Narrow length overflow", tensorErr(func() *Tensor { return v().Narrow(0, 1, math.MaxInt) }), "xla: Narrow:"},
		{"Narrow negative start", tensorErr(func() *Tensor { return v().Narrow(0, -1, 1) }), "xla: Narrow: [-1, 0) out of range"},
		{"MatMul of empty inner dims to a huge output", tensorErr(func() *Tensor {
			a := d.Zeros(Float32, big, 0)
			return a.MatMul(d.Zeros(Float32, 0, big))
		}), "larger than 1 TiB"},
		{"unsupported dtype", tensorErr(func() *Tensor { return d.Zeros(DType(99), 2) }), "unsupported dtype"},
		{"Concat of empty tensors whose axis overflows", tensorErr(func() *Tensor {
			huge := d.Zeros(Float32, 0, 1<<62)
			return Concat(1, huge, huge, huge)
		}), "xla: concat: negative dimension"},
		{"Unsqueeze of a bad tensor keeps its error", tensorErr(func() *Tensor { return d.Zeros(Float32, -3).Unsqueeze(0) }), "xla: Zeros: negative dimension -3"},
		{"Flatten of an overflowing shape", tensorErr(func() *Tensor { return d.Ones(Float32, big, big, big).Flatten() }), "xla: Ones: shape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tt.run() })
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	require.NoError(t, d.MarkStep(testContext(t)), "error tensors that were dropped do not fail later steps")
}

// TestZeroSizeTensorsEndToEnd: torch allows empty tensors (an empty last
// batch is real). They upload, flow through every kind of op, reduce, take
// gradients, and read back.
func TestZeroSizeTensorsEndToEnd(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)

	x, err := FromSlice(d, []float32{}, 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 10}, x.Dims())
	xb, err := FromBytes(d, Float32, []int{0, 10}, nil)
	require.NoError(t, err)
	xi, err := FromSlice(d, []int32{}, 0)
	require.NoError(t, err)

	w := mustFromSlice(t, d, make([]float32, 50), 10, 5)
	require.NoError(t, w.SetRequiresGrad(true))
	y := x.Add(xb).MatMul(w).Relu() // [0, 5]
	loss := y.Square().Sum()        // 0 over no elements
	require.NoError(t, loss.Backward())
	mean := y.Mean()

	cases := []struct {
		name string
		t    *Tensor
		dims []int
		want []float32
	}{
		{"matmul of an empty batch", y, []int{0, 5}, []float32{}},
		{"sum over no elements", loss, nil, []float32{0}},
		{"gradient from an empty batch", w.Grad(), []int{10, 5}, make([]float32, 50)},
		{"reshape with -1", x.Reshape(-1, 2, 5), []int{0, 2, 5}, []float32{}},
		{"reshape to more axes", x.Reshape(0, 5, 2), []int{0, 5, 2}, []float32{}},
		{"concat with a non-empty tensor", Concat(0, x, d.Ones(Float32, 1, 10)), []int{1, 10}, ones(10)},
		{"narrow to nothing", d.Ones(Float32, 4).Narrow(0, 2, 0), []int{0}, []float32{}},
		{"narrow at the end", d.Ones(Float32, 4).Narrow(0, 4, 0), []int{0}, []float32{}},
		{"cast and compare", xi.Cast(Float32).Greater(d.Zeros(Float32, 0)).Cast(Float32), []int{0}, []float32{}},
		{"sum of an axis of length 0", x.Sum(0), []int{10}, make([]float32, 10)},
		{"zeros", d.Zeros(Float32, 3, 0), []int{3, 0}, []float32{}},
		{"arange 0", d.Arange(0, Float32), []int{0}, []float32{}},
		{"rand", d.RandN(Float32, 0, 7), []int{0, 7}, []float32{}},
		{"permute", x.Permute(1, 0), []int{10, 0}, []float32{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, c.t.Err())
			assert.Equal(t, c.dims, nilIfEmpty(c.t.Dims()))
			got, err := c.t.Float32s(ctx)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
	m, err := mean.Item(ctx)
	require.NoError(t, err)
	assert.True(t, math.IsNaN(m), "the mean of no elements is NaN, as in torch")

	_, err = x.Item(ctx)
	assert.ErrorContains(t, err, "needs exactly one element")
	raw, err := x.Bytes(ctx)
	require.NoError(t, err)
	assert.Empty(t, raw)

	// An empty result computed in one step feeds the next step.
	next := y.AddScalar(1).Sum()
	got, err := next.Item(ctx)
	require.NoError(t, err)
	assert.Zero(t, got)
}

func ones(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func nilIfEmpty(dims []int) []int {
	if len(dims) == 0 {
		return nil
	}
	return dims
}
