package dist

import (
	"fmt"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/xladdp/xladdp/reduce"
)

// DType is the element type of a host buffer.
type DType int

const (
	Float32 DType = iota + 1
	Float64
	BFloat16
	Int32
	Int64
)

var dtypeNames = map[DType]string{Float32: "float32", Float64: "float64", BFloat16: "bfloat16", Int32: "int32", Int64: "int64"}
var dtypeSizes = map[DType]int{Float32: 4, Float64: 8, BFloat16: 2, Int32: 4, Int64: 8}

func (d DType) String() string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size returns the element size in bytes.
func (d DType) Size() int { return dtypeSizes[d] }

// Buffer is a view of a host slice that collectives read and write in
// place; no data is copied when it is made.
type Buffer struct {
	DType DType
	bytes []byte
	// shared is the segment of a SharedBuffer; after Destroy the buffer
	// is unusable.
	shared *shmState
}

// Values returns the buffer's elements as a slice of T (no copy: writes go
// to the buffer). T must match the dtype (float32, float64,
// bfloat16.BFloat16, int32, int64). A SharedBuffer of a destroyed group
// returns ErrGroupClosed.
func Values[T float32 | float64 | bfloat16.BFloat16 | int32 | int64](b Buffer) ([]T, error) {
	var zero T
	if want := dtypeOf(zero); want != b.DType {
		return nil, fmt.Errorf("ddp: Values[%s] of a %s buffer", want, b.DType)
	}
	if err := b.usable("Values"); err != nil {
		return nil, err
	}
	return asSlice[T](b), nil
}

func dtypeOf(v any) DType {
	switch v.(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case bfloat16.BFloat16:
		return BFloat16
	case int32:
		return Int32
	}
	return Int64
}

// usable fails for a SharedBuffer whose group was destroyed.
func (b Buffer) usable(what string) error {
	if b.shared != nil && b.shared.released.Load() {
		return fmt.Errorf("ddp: %s: %w: the SharedBuffer's group was destroyed", what, ErrGroupClosed)
	}
	return nil
}

func view[T any](x []T, d DType) Buffer {
	if len(x) == 0 {
		return Buffer{DType: d}
	}
	return Buffer{DType: d, bytes: unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*d.Size())}
}

// Float32s views x as a Buffer.
func Float32s(x []float32) Buffer { return view(x, Float32) }

// Float64s views x as a Buffer.
func Float64s(x []float64) Buffer { return view(x, Float64) }

// BFloat16s views x as a Buffer.
func BFloat16s(x []bfloat16.BFloat16) Buffer { return view(x, BFloat16) }

// Int32s views x as a Buffer.
func Int32s(x []int32) Buffer { return view(x, Int32) }

// Int64s views x as a Buffer.
func Int64s(x []int64) Buffer { return view(x, Int64) }

// Len returns the number of elements.
func (b Buffer) Len() int {
	if b.DType.Size() == 0 {
		return 0
	}
	return len(b.bytes) / b.DType.Size()
}

// slice returns elements [i, j).
func (b Buffer) slice(i, j int) Buffer {
	s := b.DType.Size()
	return Buffer{DType: b.DType, bytes: b.bytes[i*s : j*s], shared: b.shared}
}

// Bytes is the buffer's memory, which operations read and write in place.
func (b Buffer) Bytes() []byte { return b.bytes }

// ByteBuffer views raw as elements of d (len(raw) a multiple of d's size),
// for data that is already bytes (a packed blob, a device copy).
func ByteBuffer(d DType, raw []byte) Buffer { return Buffer{DType: d, bytes: raw} }

func (b Buffer) String() string { return fmt.Sprintf("%s[%d]", b.DType, b.Len()) }

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

func checkBuffer(what string, b Buffer) error {
	if _, ok := dtypeSizes[b.DType]; !ok {
		return fmt.Errorf("ddp: %s: unsupported dtype %s (use Float32s, Float64s, BFloat16s, Int32s or Int64s)", what, b.DType)
	}
	return b.usable(what)
}

func checkOp(what string, op ReduceOp) error {
	if !op.Valid() {
		return fmt.Errorf("ddp: %s: unknown reduce op %d (use Sum, Avg, Min, Max or Product)", what, int(op))
	}
	return nil
}

func asSlice[T any](b Buffer) []T {
	var zero T
	n := len(b.bytes) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b.bytes[0])), n)
}

// reduceInto combines src into dst elementwise (Avg accumulates as Sum; the
// division happens once at the end, in finishAvg).
func reduceInto(dst, src Buffer, op ReduceOp) {
	switch dst.DType {
	case Float32:
		reduceTyped(asSlice[float32](dst), asSlice[float32](src), op)
	case Float64:
		reduceTyped(asSlice[float64](dst), asSlice[float64](src), op)
	case Int32:
		reduceTyped(asSlice[int32](dst), asSlice[int32](src), op)
	case Int64:
		reduceTyped(asSlice[int64](dst), asSlice[int64](src), op)
	case BFloat16:
		d, s := asSlice[bfloat16.BFloat16](dst), asSlice[bfloat16.BFloat16](src)
		for i := range d {
			a, b := d[i].Float32(), s[i].Float32()
			d[i] = bfloat16.FromFloat32(combine(a, b, op))
		}
	}
}

type number interface {
	~float32 | ~float64 | ~int32 | ~int64
}

func combine[T number](a, b T, op ReduceOp) T {
	switch op {
	case Min:
		return min(a, b)
	case Max:
		return max(a, b)
	case Product:
		return a * b
	}
	return a + b
}

func reduceTyped[T number](dst, src []T, op ReduceOp) {
	switch op {
	case Min:
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
	case Max:
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
	case Product:
		for i := range dst {
			dst[i] *= src[i]
		}
	default:
		for i := range dst {
			dst[i] += src[i]
		}
	}
}

// finishAvg divides a Sum by n; integers divide truncating toward zero.
func finishAvg(b Buffer, n int) {
	switch b.DType {
	case Float32:
		divide(asSlice[float32](b), float32(n))
	case Float64:
		divide(asSlice[float64](b), float64(n))
	case Int32:
		divide(asSlice[int32](b), int32(n))
	case Int64:
		divide(asSlice[int64](b), int64(n))
	case BFloat16:
		s := asSlice[bfloat16.BFloat16](b)
		for i := range s {
			s[i] = bfloat16.FromFloat32(s[i].Float32() / float32(n))
		}
	}
}

func divide[T number](s []T, n T) {
	for i := range s {
		s[i] /= n
	}
}
