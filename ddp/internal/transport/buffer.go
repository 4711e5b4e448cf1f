package transport

import (
	"fmt"
	"unsafe"

	"github.com/gomlx/compute/dtypes/bfloat16"
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
	// lease, when set, is the memory's owner (a shared-memory segment);
	// once it is released the buffer is unusable.
	lease Lease
}

// Lease is what a buffer's memory belongs to when it is not the Go heap.
type Lease interface {
	// Released reports whether the memory was given back (its group was
	// destroyed).
	Released() bool
}

// LeasedBuffer views raw, which lease owns, as elements of d.
func LeasedBuffer(d DType, raw []byte, lease Lease) Buffer {
	return Buffer{DType: d, bytes: raw, lease: lease}
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
	if err := b.Usable("Values"); err != nil {
		return nil, err
	}
	return AsSlice[T](b), nil
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

// Usable fails for a buffer whose lease was released (a SharedBuffer of
// a destroyed group).
func (b Buffer) Usable(what string) error {
	if b.lease != nil && b.lease.Released() {
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

// Slice returns elements [i, j).
func (b Buffer) Slice(i, j int) Buffer {
	s := b.DType.Size()
	return Buffer{DType: b.DType, bytes: b.bytes[i*s : j*s], lease: b.lease}
}

// Bytes is the buffer's memory, which operations read and write in place.
func (b Buffer) Bytes() []byte { return b.bytes }

// ByteBuffer views raw as elements of d (len(raw) a multiple of d's size),
// for data that is already bytes (a packed blob, a device copy).
func ByteBuffer(d DType, raw []byte) Buffer { return Buffer{DType: d, bytes: raw} }

func (b Buffer) String() string { return fmt.Sprintf("%s[%d]", b.DType, b.Len()) }

// Check fails for a buffer of an unsupported dtype or an unusable one.
func (b Buffer) Check(what string) error {
	if _, ok := dtypeSizes[b.DType]; !ok {
		return fmt.Errorf("ddp: %s: unsupported dtype %s (use Float32s, Float64s, BFloat16s, Int32s or Int64s)", what, b.DType)
	}
	return b.Usable(what)
}

// AsSlice views b's memory as a slice of T (no check of the dtype).
func AsSlice[T any](b Buffer) []T {
	var zero T
	n := len(b.bytes) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b.bytes[0])), n)
}

// ReduceInto combines src into dst elementwise (Avg accumulates as Sum; the
// division happens once at the end, in FinishAvg).
func ReduceInto(dst, src Buffer, op reduce.Op) {
	switch dst.DType {
	case Float32:
		reduceTyped(AsSlice[float32](dst), AsSlice[float32](src), op)
	case Float64:
		reduceTyped(AsSlice[float64](dst), AsSlice[float64](src), op)
	case Int32:
		reduceTyped(AsSlice[int32](dst), AsSlice[int32](src), op)
	case Int64:
		reduceTyped(AsSlice[int64](dst), AsSlice[int64](src), op)
	case BFloat16:
		d, s := AsSlice[bfloat16.BFloat16](dst), AsSlice[bfloat16.BFloat16](src)
		for i := range d {
			a, b := d[i].Float32(), s[i].Float32()
			d[i] = bfloat16.FromFloat32(combine(a, b, op))
		}
	}
}

type number interface {
	~float32 | ~float64 | ~int32 | ~int64
}

func combine[T number](a, b T, op reduce.Op) T {
	switch op {
	case reduce.Min:
		return min(a, b)
	case reduce.Max:
		return max(a, b)
	case reduce.Product:
		return a * b
	}
	return a + b
}

func reduceTyped[T number](dst, src []T, op reduce.Op) {
	switch op {
	case reduce.Min:
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
	case reduce.Max:
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
	case reduce.Product:
		for i := range dst {
			dst[i] *= src[i]
		}
	default:
		for i := range dst {
			dst[i] += src[i]
		}
	}
}

// FinishAvg divides a Sum by n; integers divide truncating toward zero.
func FinishAvg(b Buffer, n int) {
	switch b.DType {
	case Float32:
		divide(AsSlice[float32](b), float32(n))
	case Float64:
		divide(AsSlice[float64](b), float64(n))
	case Int32:
		divide(AsSlice[int32](b), int32(n))
	case Int64:
		divide(AsSlice[int64](b), int64(n))
	case BFloat16:
		s := AsSlice[bfloat16.BFloat16](b)
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
