package xla

import (
	"bytes"
	"log"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecordTimeErrors: bad shapes fail when the op is recorded, with the op
// and shapes in the message, and the error sticks to everything computed
// from the result, to MarkStep and to Item.
func TestRecordTimeErrors(t *testing.T) {
	eng := newEngine(t, 2)
	d := eng.Device(0)
	m := mustFromSlice(t, d, make([]float32, 6), 2, 3)
	v := mustFromSlice(t, d, make([]float32, 4), 4)
	img := mustFromSlice(t, d, make([]float32, 2*3*5*5), 2, 3, 5, 5)
	kernel := mustFromSlice(t, d, make([]float32, 4*2*3*3), 4, 2, 3, 3)
	labels, err := FromSlice(d, []float32{1, 2}, 2, 1)
	require.NoError(t, err)
	other := mustFromSlice(t, eng.Device(1), make([]float32, 6), 2, 3)

	tests := []struct {
		name string
		got  *Tensor
		want string
	}{
		{"matmul contracting", m.MatMul(m), "xla: MatMul: (Float32)[2, 3] x (Float32)[2, 3]: contracting dimensions differ (3 vs 2)"},
		{"add broadcast", m.Add(v), "xla: add: shapes (Float32)[2, 3] and (Float32)[4] do not broadcast"},
		{"add dtype", m.Add(m.Cast(Int32)), "dtypes differ: (Float32)[2, 3] and (Int32)[2, 3] (convert one with Cast)"},
		{"reshape size", m.Reshape(4, 2), "xla: Reshape: [4 2] has 8 elements but (Float32)[2, 3] has 6"},
		{"reshape infer", m.Reshape(-1, 4), "cannot infer -1 in [-1 4]"},
		{"sum axis", m.Sum(2), "xla: Sum: axis 2 out of range for rank 2"},
		{"narrow range", m.Narrow(1, 2, 2), "xla: Narrow: [2, 4) out of range for axis 1"},
		{"conv channels", Conv2d(img, kernel, Conv2dOptions{}), "expects 2 input channels per group, input (Float32)[2, 3, 5, 5] has 3/1"},
		{"pool rank", MaxPool2d(m, Pool2dOptions{Kernel: [2]int{2, 2}}), "xla: MaxPool2d: needs a float input [N, C, H, W], got (Float32)[2, 3]"},
		{"gather dtype", m.TakeAlongAxis(labels, 1), "xla: TakeAlongAxis: indices are (Float32)[2, 1], want Int32 or Int64"},
		{"log of int", m.Cast(Int32).Log(), "xla: Log: needs a float tensor, got (Int32)[2, 3]"},
		{"devices", m.Add(other), "xla: add: operands on different devices (cpu:0 and cpu:1)"},
		{"sticky", m.MatMul(m).Relu().Sum(), "xla: MatMul: (Float32)[2, 3] x (Float32)[2, 3]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, tt.got.Err())
			assert.Contains(t, tt.got.Err().Error(), tt.want)
			_, err := tt.got.Item(testContext(t))
			assert.ErrorContains(t, err, tt.want)
		})
	}

	bad := m.MatMul(m).Sum()
	err = d.MarkStep(testContext(t))
	assert.ErrorContains(t, err, "contracting dimensions differ", "MarkStep reports a live tensor's error")
	runtime.KeepAlive(bad)

	assert.ErrorContains(t, m.Sum(0).Backward(), "Backward of (Float32)[3]: needs a float scalar")
	assert.ErrorContains(t, m.Assign(v), "Assign: destination is (Float32)[2, 3] but source is (Float32)[4]")
	assert.ErrorContains(t, m.Cast(Int32).SetRequiresGrad(true), "only float tensors have gradients")
}

// TestDebugExplainsRecompilation: with XLADDP_DEBUG=1 a recompilation logs
// which node changed against the previous program.
func TestDebugExplainsRecompilation(t *testing.T) {
	t.Setenv(EnvDebug, "1")
	var logs bytes.Buffer
	log.SetOutput(&logs)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	for _, rows := range []int{2, 2, 5} {
		x := mustFromSlice(t, d, make([]float32, rows*3), rows, 3)
		y := x.Exp().Sum()
		_, err := y.Item(ctx)
		require.NoError(t, err)
	}
	out := logs.String()
	assert.Contains(t, out, "xladdp: recompiling for devices[0]: node %0 changed from")
	assert.Contains(t, out, `"parameter() -> (Float32)[2, 3]" to "parameter() -> (Float32)[5, 3]"`)
	assert.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("recompiling")), "the second, identical step hit the cache")
}
