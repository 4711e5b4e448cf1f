package pjrtx

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/gomlx/core/graph"
)

// valueLayout is where go-xla's compute backend keeps a value's StableHLO
// value and shape (xla.Node.value, xla.Node.shape): a custom call is
// built with go-xla's StableHLO builder, beside the op the backend would
// have built, and handed back as the backend's own value.
var valueLayout = sync.OnceValues(func() ([2]uintptr, error) {
	return offsetsOf[gomlxxla.Node](typedField{"value", reflect.TypeFor[*stablehlo.Value]()}, typedField{"shape", reflect.TypeFor[shapes.Shape]()})
})

// StableHLOValue returns the StableHLO value behind a value of go-xla's
// compute backend.
func StableHLOValue(v compute.Value) (*stablehlo.Value, error) {
	return pointerAt[gomlxxla.Node, stablehlo.Value](valueLayout, v, 0, "value of go-xla's compute backend")
}

// valueLike makes s a value of the backend function like is a value of.
func valueLike(like compute.Value, s *stablehlo.Value) (compute.Value, error) {
	layout, err := valueLayout()
	if err != nil {
		return nil, err
	}
	n, ok := like.(*gomlxxla.Node)
	if !ok || n == nil {
		return nil, fmt.Errorf("a %T, not a value of go-xla's compute backend", like)
	}
	out := new(gomlxxla.Node)
	*out = *n // the builder it belongs to
	*(**stablehlo.Value)(unsafe.Add(unsafe.Pointer(out), layout[0])) = s
	*(*shapes.Shape)(unsafe.Add(unsafe.Pointer(out), layout[1])) = gomlxxla.ShapeFromXLA(s.Shape())
	return out, nil
}

// GraphNodeValue returns the backend value of a GoMLX node with one
// output (graph.Node.outputOps[0]).
func GraphNodeValue(n *graph.Node) (compute.Value, error) {
	if n == nil {
		return nil, errors.New("nil GoMLX node")
	}
	ops := reflect.ValueOf(n).Elem().FieldByName("outputOps")
	if !ops.IsValid() || ops.Type() != reflect.TypeFor[[]compute.Value]() {
		return nil, fmt.Errorf("%w: GoMLX's graph.Node has no outputOps []compute.Value field", ErrIncompatible)
	}
	if ops.Len() != 1 {
		return nil, fmt.Errorf("the GoMLX node has %d outputs, not one", ops.Len())
	}
	return *(*compute.Value)(unsafe.Pointer(ops.Index(0).UnsafeAddr())), nil
}
