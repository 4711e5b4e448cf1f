package pjrtx

import (
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
	return offsetsOf[gomlxxla.Buffer](
		typedField{"backend", reflect.TypeFor[*gomlxxla.Backend]()}, typedField{"pjrtBuffer", reflect.TypeFor[*pjrt.Buffer]()})
})

// typedField is an unexported struct field read by offset: its name and type.
type typedField struct {
	name string
	typ  reflect.Type
}

// offsetsOf returns the offsets of fields in T, after checking that the
// binary links the pinned versions and that each field has its type.
func offsetsOf[T any](fields ...typedField) ([2]uintptr, error) {
	var offsets [2]uintptr
	if err := Compatible(); err != nil {
		return offsets, err
	}
	t := reflect.TypeFor[T]()
	for i, want := range fields {
		f, ok := t.FieldByName(want.name)
		if !ok || f.Type != want.typ {
			return offsets, fmt.Errorf("%w: %s has no field %s %s", ErrIncompatible, t, want.name, want.typ)
		}
		offsets[i] = f.Offset
	}
	return offsets, nil
}

// PJRTBufferOf returns the PJRT buffer inside a buffer of go-xla's compute
// backend.
func PJRTBufferOf(b compute.Buffer) (*pjrt.Buffer, error) {
	return pointerAt[gomlxxla.Buffer, pjrt.Buffer](gomlxBufferLayout, b, 1, "buffer of go-xla's compute backend")
}

// pointerAt reads the pointer field at layout()[i] of v, a *S, which is
// what; an error where v is no *S or holds no pointer there.
func pointerAt[S, F any](layout func() ([2]uintptr, error), v any, i int, what string) (*F, error) {
	offsets, err := layout()
	if err != nil {
		return nil, err
	}
	s, ok := v.(*S)
	if !ok || s == nil {
		return nil, fmt.Errorf("a %T, not a %s", v, what)
	}
	f := *(**F)(unsafe.Add(unsafe.Pointer(s), offsets[i]))
	if f == nil {
		return nil, fmt.Errorf("the %s holds no %s (finalized?)", what, reflect.TypeFor[F]())
	}
	return f, nil
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
