package xla

import "github.com/gomlx/compute/dtypes"

// DType is an element type; xla re-exports GoMLX's so users need not import it.
type DType = dtypes.DType

// The element types the ops support.
const (
	Float32  = dtypes.Float32
	Float64  = dtypes.Float64
	BFloat16 = dtypes.BFloat16
	Int32    = dtypes.Int32
	Int64    = dtypes.Int64
	Bool     = dtypes.Bool
	Uint64   = dtypes.Uint64
	// InvalidDType is the zero DType: "none given".
	InvalidDType = dtypes.InvalidDType
)

// SupportedDTypes lists every element type tensors can have.
var SupportedDTypes = []DType{Float32, Float64, BFloat16, Int32, Int64, Bool, Uint64}

// OpMathDType is the dtype arithmetic on dt runs in where precision
// matters (optimizer updates, norms, softmax, losses): float32 for
// bfloat16, whose 8 significant bits round 0.999 to 1.0, else dt itself.
func OpMathDType(dt DType) DType {
	if dt == BFloat16 {
		return Float32
	}
	return dt
}
