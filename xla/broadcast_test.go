package xla

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// broadcastCase uploads replica r's values of one dtype and reads a tensor
// of that dtype back as raw bits, so -0 and NaN payloads are compared.
type broadcastCase struct {
	dtype  DType
	upload func(d *Device, r int) (*Tensor, error)
	bits   func(ctx context.Context, t *Tensor) ([]uint64, error)
}

func bitsOf[T dtypes.Supported](conv func(T) uint64) func(context.Context, *Tensor) ([]uint64, error) {
	return func(ctx context.Context, t *Tensor) ([]uint64, error) {
		v, err := Values[T](ctx, t)
		out := make([]uint64, len(v))
		for i, x := range v {
			out[i] = conv(x)
		}
		return out, err
	}
}

// TestBroadcastEveryDType: every replica gets the root's value bit for bit,
// for every dtype, special floats included (-0, a NaN with a payload, ±Inf,
// a subnormal, the extremes), from each root; outside RunReplicas it is
// the identity; a root outside the group is an error.
func TestBroadcastEveryDType(t *testing.T) {
	const n = 3
	nan := math.Float32frombits(0x7fc00123)
	f32 := func(r int) []float32 {
		return []float32{float32(math.Copysign(0, -1)), nan, float32(math.Inf(-1)), 1e-45, math.MaxFloat32, float32(r) + 0.5}
	}
	cases := []broadcastCase{
		{Float32, func(d *Device, r int) (*Tensor, error) { return FromSlice(d, f32(r), 2, 3) },
			bitsOf(func(x float32) uint64 { return uint64(math.Float32bits(x)) })},
		{Float64, func(d *Device, r int) (*Tensor, error) {
			return FromSlice(d, []float64{math.Copysign(0, -1), math.Float64frombits(0x7ff8000000000abc), 5e-324, float64(r)}, 4)
		}, bitsOf(math.Float64bits)},
		{BFloat16, func(d *Device, r int) (*Tensor, error) {
			return FromSlice(d, []bfloat16.BFloat16{bfloat16.FromFloat32(float32(math.Copysign(0, -1))), bfloat16.FromFloat32(float32(r) - 7)}, 2)
		}, bitsOf(func(x bfloat16.BFloat16) uint64 { return uint64(x) })},
		{Int32, func(d *Device, r int) (*Tensor, error) {
			return FromSlice(d, []int32{math.MinInt32, math.MaxInt32, int32(-r)}, 3)
		},
			bitsOf(func(x int32) uint64 { return uint64(uint32(x)) })},
		{Int64, func(d *Device, r int) (*Tensor, error) {
			return FromSlice(d, []int64{math.MinInt64, int64(r) << 40}, 2)
		},
			bitsOf(func(x int64) uint64 { return uint64(x) })},
		{Uint64, func(d *Device, r int) (*Tensor, error) { return FromSlice(d, []uint64{math.MaxUint64, uint64(r)}, 2) },
			bitsOf(func(x uint64) uint64 { return x })},
		{Bool, func(d *Device, r int) (*Tensor, error) { return FromSlice(d, []bool{r%2 == 0, r == 1, true}, 3) },
			bitsOf(func(x bool) uint64 {
				if x {
					return 1
				}
				return 0
			})},
	}
	eng := newEngine(t, n)
	for _, c := range cases {
		for _, root := range []int{0, 2} {
			t.Run(c.dtype.String()+"/root"+string(rune('0'+root)), func(t *testing.T) {
				want := make([][]uint64, n)
				got := make([][]uint64, n)
				err := eng.RunReplicas(testContext(t), n, func(ctx context.Context, r Replica) error {
					x, err := c.upload(r.Device(), r.Index())
					if err != nil {
						return err
					}
					if want[r.Index()], err = c.bits(ctx, x); err != nil {
						return err
					}
					got[r.Index()], err = c.bits(ctx, Broadcast(x, root))
					return err
				})
				require.NoError(t, err)
				for r := range n {
					assert.Equal(t, want[root], got[r], "replica %d", r)
				}
			})
		}
	}

	d := eng.Device(0)
	x := mustFromSlice(t, d, []float32{1, 2}, 2)
	alone, err := Broadcast(x, 0).Float32s(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, alone)
	_, err = Broadcast(x, 1).Float32s(context.Background())
	assert.ErrorContains(t, err, "Broadcast: root 1 outside the 1 local replica(s)")
	_, err = Broadcast(x, -1).Float32s(context.Background())
	assert.ErrorContains(t, err, "root -1")
}

// TestBroadcastEmptyAndCompiled: a zero-size tensor broadcasts (to an
// empty value), and a compiled step that broadcasts gives the root's value
// on every replay, with one trace.
func TestBroadcastEmptyAndCompiled(t *testing.T) {
	const n = 2
	eng := newEngine(t, n)
	traces := GetMetrics().StepTraces
	got := make([][]float32, n)
	err := eng.RunReplicas(testContext(t), n, func(ctx context.Context, r Replica) error {
		d := r.Device()
		empty, err := Broadcast(d.Zeros(Float32, 0, 3), 1).Float32s(ctx)
		if err != nil {
			return err
		}
		if len(empty) != 0 {
			return fmt.Errorf("empty broadcast gave %v", empty)
		}
		w, err := FromSlice(d, []float32{float32(r.Index()), 1}, 2)
		if err != nil {
			return err
		}
		step := Compile(func(...*Tensor) ([]*Tensor, error) {
			return nil, w.Assign(Broadcast(w.AddScalar(1), 1))
		})
		for range 3 {
			if _, err := step.Run(ctx, d); err != nil {
				return err
			}
		}
		got[r.Index()], err = w.Float32s(ctx)
		return err
	})
	require.NoError(t, err)
	// Replica 1 starts at {1, 1}; each step adds 1 and everyone takes it.
	for r := range n {
		assert.Equal(t, []float32{4, 4}, got[r], "replica %d", r)
	}
	assert.EqualValues(t, n, GetMetrics().StepTraces-traces, "one trace per replica")
}
