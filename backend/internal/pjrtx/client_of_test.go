package pjrtx

import (
	"errors"
	"reflect"

	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
)

// ClientOf returns the PJRT client of a backend go-xla made itself (the
// tests compare NewBackend with xla.NewWithOptions):
// go-xla's compute backend offers no accessor for it.
func ClientOf(b *gomlxxla.Backend) (*pjrt.Client, error) {
	if b == nil {
		return nil, errors.New("nil GoMLX XLA backend")
	}
	field := reflect.ValueOf(b).Elem().FieldByName("client")
	if !field.IsValid() || field.Type() != reflect.TypeFor[*pjrt.Client]() {
		return nil, errors.New("go-xla's compute/xla.Backend has no *pjrt.Client field named client: this go-xla is not the pinned " + pinnedGoXLA)
	}
	client := (*pjrt.Client)(field.UnsafePointer())
	if client == nil {
		return nil, errors.New("the GoMLX XLA backend has no PJRT client (already finalized?)")
	}
	return client, nil
}
