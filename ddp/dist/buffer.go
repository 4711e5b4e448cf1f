package dist

import (
	"fmt"

	"github.com/gomlx/compute/dtypes/bfloat16"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/reduce"
)

// Buffer is a view of a host slice that collectives read and write in
// place; no data is copied when it is made (Float32s and the others).
type Buffer = transport.Buffer

// DType is the element type of a host buffer.
type DType = transport.DType

// The element types a Buffer holds.
const (
	Float32  = transport.Float32
	Float64  = transport.Float64
	BFloat16 = transport.BFloat16
	Int32    = transport.Int32
	Int64    = transport.Int64
)

// Float32s views x as a Buffer.
func Float32s(x []float32) Buffer { return transport.Float32s(x) }

// Float64s views x as a Buffer.
func Float64s(x []float64) Buffer { return transport.Float64s(x) }

// BFloat16s views x as a Buffer.
func BFloat16s(x []bfloat16.BFloat16) Buffer { return transport.BFloat16s(x) }

// Int32s views x as a Buffer.
func Int32s(x []int32) Buffer { return transport.Int32s(x) }

// Int64s views x as a Buffer.
func Int64s(x []int64) Buffer { return transport.Int64s(x) }

// ByteBuffer views raw as elements of d (len(raw) a multiple of d's size),
// for data that is already bytes (a packed blob, a device copy).
func ByteBuffer(d DType, raw []byte) Buffer { return transport.ByteBuffer(d, raw) }

// Values returns the buffer's elements as a slice of T (no copy: writes go
// to the buffer). T must match the dtype (float32, float64,
// bfloat16.BFloat16, int32, int64). A SharedBuffer of a destroyed group
// returns ErrGroupClosed.
func Values[T float32 | float64 | bfloat16.BFloat16 | int32 | int64](b Buffer) ([]T, error) {
	return transport.Values[T](b)
}

// ReduceOp combines values across ranks: the type package xla's
// in-graph AllReduce uses too (package reduce).
type ReduceOp = reduce.Op

// The reduce ops, named as torch.distributed names them.
const (
	Sum     = reduce.Sum
	Avg     = reduce.Avg
	Min     = reduce.Min
	Max     = reduce.Max
	Product = reduce.Product
)

func checkOp(what string, op ReduceOp) error {
	if !op.Valid() {
		return fmt.Errorf("ddp: %s: unknown reduce op %d (use Sum, Avg, Min, Max or Product)", what, int(op))
	}
	return nil
}
