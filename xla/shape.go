package xla

import (
	"math/bits"
	"slices"

	"github.com/gomlx/compute/shapes"
)

// MaxTensorBytes bounds one tensor's size (1 TiB): more than any device
// holds, and far below where element counts overflow int64. A larger shape
// is an error when recorded; it never reaches the plugin, which aborts the
// process on such shapes.
const MaxTensorBytes = 1 << 40

// shapeOf builds a shape without GoMLX's panic on negative dimensions;
// record and recordOn validate every shape before it is used.
func shapeOf(dtype DType, dims ...int) shapes.Shape {
	return shapes.Shape{DType: dtype, Dimensions: slices.Clone(dims)}
}

// numElements multiplies dims; ok is false for a negative dimension or a
// product that overflows.
func numElements(dims []int) (n int, ok bool) {
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
	}
	if slices.Contains(dims, 0) {
		return 0, true
	}
	n = 1
	for _, d := range dims {
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > uint64(MaxTensorBytes) {
			return 0, false
		}
		n = int(lo)
	}
	return n, true
}

// checkShape reports a shape no device could hold: a negative dimension,
// an unsupported dtype, or more than MaxTensorBytes.
func checkShape(op string, s shapes.Shape) error {
	for axis, d := range s.Dimensions {
		if d < 0 {
			return opError(op, "negative dimension %d at axis %d of %v", d, axis, s.Dimensions)
		}
	}
	if !supportedDType(s.DType) {
		return opError(op, "unsupported dtype %s (use %v)", s.DType, SupportedDTypes)
	}
	n, ok := numElements(s.Dimensions)
	if !ok || uint64(n) > uint64(MaxTensorBytes)/uint64(s.DType.Size()) {
		return opError(op, "shape %v of %s is larger than 1 TiB (MaxTensorBytes), more than any device holds", s.Dimensions, s.DType)
	}
	return nil
}

// checkDims is checkShape for dims given by the user before any shape exists.
func checkDims(op string, dtype DType, dims []int) (shapes.Shape, error) {
	s := shapeOf(dtype, dims...)
	return s, checkShape(op, s)
}

func supportedDType(dt DType) bool { return slices.Contains(SupportedDTypes, dt) }
