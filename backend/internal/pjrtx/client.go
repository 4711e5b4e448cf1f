package pjrtx

import (
	"errors"
	"reflect"

	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
)

// ClientOf returns the PJRT client a GoMLX XLA backend was created with;
// GoMLX v0.26.0 offers no accessor for it.
func ClientOf(b *gomlxxla.Backend) (*pjrt.Client, error) {
	if b == nil {
		return nil, errors.New("nil GoMLX XLA backend")
	}
	field := reflect.ValueOf(b).Elem().FieldByName("client")
	if !field.IsValid() || field.Type() != reflect.TypeFor[*pjrt.Client]() {
		return nil, errors.New("GoMLX's xla.Backend has no *pjrt.Client field named client: this GoMLX version is not the pinned v0.26.0")
	}
	client := (*pjrt.Client)(field.UnsafePointer())
	if client == nil {
		return nil, errors.New("the GoMLX XLA backend has no PJRT client (already finalized?)")
	}
	return client, nil
}
