package pjrtx

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/compute"
	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
)

// gomlxBufferLayout is where go-xla's compute backend keeps a buffer's
// owner and PJRT buffer (xla.Buffer.backend, xla.Buffer.pjrtBuffer): the
// engine runs programs through PJRT itself and hands GoMLX its outputs
// as GoMLX buffers. Read once, type-checked, so an upgrade that moves
// them fails here, loudly.
var gomlxBufferLayout = sync.OnceValues(func() ([2]uintptr, error) {
	if err := Compatible(); err != nil {
		return [2]uintptr{}, err
	}
	t := reflect.TypeFor[gomlxxla.Buffer]()
	owner, ok := t.FieldByName("backend")
	if !ok || owner.Type != reflect.TypeFor[*gomlxxla.Backend]() {
		return [2]uintptr{}, fmt.Errorf("%w: go-xla's compute/xla.Buffer has no backend *Backend field", ErrIncompatible)
	}
	inner, ok := t.FieldByName("pjrtBuffer")
	if !ok || inner.Type != reflect.TypeFor[*pjrt.Buffer]() {
		return [2]uintptr{}, fmt.Errorf("%w: go-xla's compute/xla.Buffer has no pjrtBuffer *pjrt.Buffer field", ErrIncompatible)
	}
	return [2]uintptr{owner.Offset, inner.Offset}, nil
})

// PJRTBufferOf returns the PJRT buffer inside a buffer of go-xla's compute
// backend.
func PJRTBufferOf(b compute.Buffer) (*pjrt.Buffer, error) {
	layout, err := gomlxBufferLayout()
	if err != nil {
		return nil, err
	}
	xb, ok := b.(*gomlxxla.Buffer)
	if !ok || xb == nil {
		return nil, fmt.Errorf("a %T, not a buffer of go-xla's compute backend", b)
	}
	pb := *(**pjrt.Buffer)(unsafe.Add(unsafe.Pointer(xb), layout[1]))
	if pb == nil {
		return nil, errors.New("the buffer was finalized")
	}
	return pb, nil
}

// WrapPJRTBuffer makes pb a buffer of owner, go-xla's compute backend, as
// the backend's own Execute does with its outputs.
func WrapPJRTBuffer(owner *gomlxxla.Backend, pb *pjrt.Buffer) (compute.Buffer, error) {
	layout, err := gomlxBufferLayout()
	if err != nil {
		return nil, err
	}
	xb := new(gomlxxla.Buffer)
	*(**gomlxxla.Backend)(unsafe.Add(unsafe.Pointer(xb), layout[0])) = owner
	*(**pjrt.Buffer)(unsafe.Add(unsafe.Pointer(xb), layout[1])) = pb
	return xb, nil
}
