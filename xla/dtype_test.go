package xla

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tolerance is the stated accuracy per dtype, relative to max(1, |want|):
// bfloat16 keeps 8 significant bits (2^-8 ≈ 0.4%, one rounding per op).
func tolerance(dt DType) float64 {
	switch dt {
	case BFloat16:
		return 1.0 / 128
	case Float32:
		return 1e-6
	case Float64:
		return 1e-12
	}
	return 0 // integers and Bool are exact
}

// hostValues reads any dtype's values as float64 through toHost.
func hostValues(t *testing.T, x *Tensor) []float64 {
	t.Helper()
	host, err := x.toHost(testContext(t))
	require.NoError(t, err)
	var out []float64
	require.NoError(t, host.ConstFlatData(func(flat any) {
		switch f := flat.(type) {
		case []float32:
			for _, v := range f {
				out = append(out, float64(v))
			}
		case []float64:
			out = append(out, f...)
		case []bfloat16.BFloat16:
			for _, v := range f {
				out = append(out, float64(v.Float32()))
			}
		case []int32:
			for _, v := range f {
				out = append(out, float64(v))
			}
		case []int64:
			for _, v := range f {
				out = append(out, float64(v))
			}
		case []uint64:
			for _, v := range f {
				out = append(out, float64(v))
			}
		case []bool:
			for _, v := range f {
				out = append(out, map[bool]float64{false: 0, true: 1}[v])
			}
		default:
			t.Fatalf("unexpected host type %T", flat)
		}
	}))
	return out
}

// scalarOps are the scalar ops with their float64 references (integer
// division truncates toward zero).
var scalarOps = []struct {
	name string
	rec  func(x *Tensor, v float64) *Tensor
	ref  func(x, v float64, integer bool) float64
}{
	{"AddScalar", (*Tensor).AddScalar, func(x, v float64, _ bool) float64 { return x + v }},
	{"SubScalar", (*Tensor).SubScalar, func(x, v float64, _ bool) float64 { return x - v }},
	{"MulScalar", (*Tensor).MulScalar, func(x, v float64, _ bool) float64 { return x * v }},
	{"DivScalar", (*Tensor).DivScalar, func(x, v float64, integer bool) float64 {
		if integer {
			return math.Trunc(x / v)
		}
		return x / v
	}},
	{"PowScalar", (*Tensor).PowScalar, func(x, v float64, _ bool) float64 { return math.Pow(x, v) }},
}

// TestEveryDTypeThroughScalarOps: every exported dtype goes through every
// scalar op (with 1, a program constant, and 3, an uploaded scalar), Full,
// Item and ToHost, against float64 arithmetic. bfloat16 used to panic in
// all of them. Arithmetic on Bool is a record-time error, as the dtype has
// no arithmetic in XLA.
func TestEveryDTypeThroughScalarOps(t *testing.T) {
	e := newEngine(t, 1)
	d := e.Device(0)
	ctx := testContext(t)
	in := []float64{6, 9, 12, 15}
	ops := scalarOps
	for _, dt := range SupportedDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			integer := !dt.IsFloat()
			x := d.Full(0, dt, 4)
			if dt != Bool {
				x = d.Arange(4, dt).MulScalar(3).AddScalar(6) // 6, 9, 12, 15
			}
			for _, op := range ops {
				for _, v := range []float64{1, 3} {
					y := op.rec(x, v)
					if dt == Bool {
						assert.ErrorContains(t, y.Err(), "Bool", "%s on Bool", op.name)
						continue
					}
					require.NoError(t, y.Err(), "%s(%g)", op.name, v)
					got := hostValues(t, y)
					for i, xi := range in {
						want := op.ref(xi, v, integer)
						assert.InDelta(t, want, got[i], tolerance(dt)*math.Max(1, math.Abs(want)), "%s(%g) of %g", op.name, v, xi)
					}
				}
			}
			for _, v := range []float64{0, 1, 2.5, -7} {
				full := d.Full(v, dt)
				want := v
				switch {
				case dt == Bool:
					want = map[bool]float64{false: 0, true: 1}[v != 0]
				case dt == Uint64 && v < 0:
					continue // no negative unsigned values
				case integer:
					want = math.Trunc(v)
				}
				got, err := full.Item(ctx)
				require.NoError(t, err, "Item of Full(%g)", v)
				assert.InDelta(t, want, got, tolerance(dt)*math.Max(1, math.Abs(want)), "Item of Full(%g)", v)
				assert.Equal(t, []float64{want}, hostValues(t, d.Full(v, dt, 1)), fmt.Sprintf("ToHost of Full(%g)", v))
			}
		})
	}
}
