package pjrtx

/*
#include <stdint.h>
#include <stdlib.h>
#include "kv.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"

	"github.com/gomlx/compute"
	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
)

// go-xla's own helpers, which newClient calls on the client it creates.
//
//go:linkname namedValues github.com/gomlx/go-xla/pjrt.NamedValuesMap.mallocArrayPJRT_NamedValue
func namedValues(m pjrt.NamedValuesMap) (unsafe.Pointer, uint64, error)

//go:linkname clientPlatformName github.com/gomlx/go-xla/pjrt.pjrtClientPlatformName
func clientPlatformName(plugin *pjrt.Plugin, client *pjrt.Client) (string, error)

//go:linkname clientPlatformVersion github.com/gomlx/go-xla/pjrt.pjrtClientPlatformVersion
func clientPlatformVersion(plugin *pjrt.Plugin, client *pjrt.Client) (string, error)

//go:linkname clientProcessIndex github.com/gomlx/go-xla/pjrt.pjrtClientProcessIndex
func clientProcessIndex(plugin *pjrt.Plugin, client *pjrt.Client) (int, error)

//go:linkname clientAddressableDevices github.com/gomlx/go-xla/pjrt.pjrtClientAddressableDevices
func clientAddressableDevices(plugin *pjrt.Plugin, client *pjrt.Client) ([]*pjrt.Device, error)

//go:linkname destroyClientC github.com/gomlx/go-xla/pjrt.(*clientC).Destroy
func destroyClientC(c unsafe.Pointer, plugin *pjrt.Plugin) error

// BackendOptions is how NewBackend makes go-xla's compute backend: what
// go-xla's own constructor (xla.NewWithOptions) takes as a config string
// and options, and the job's key-value store.
type BackendOptions struct {
	// Options are the plugin's client options (PJRT named values).
	Options map[string]any
	// SharedBuffers: GoMLX may read and write the CPU client's buffers in
	// place ("shared_buffers" in go-xla's config).
	SharedBuffers bool
	// KeyValue, where the process is one of a job's, is given to the
	// plugin as PJRT_Client_Create's key-value callbacks.
	KeyValue KeyValue
	// HasKeyValue says KeyValue is set.
	HasKeyValue bool
}

// NewBackend loads the plugin at path and returns go-xla's compute
// backend on a client created here, and the client: go-xla's constructor creates the
// client with no key-value callbacks ("No callback support yet"), which
// a plugin-side distributed runtime (NCCL across processes) needs. The
// backend is assembled as xla.NewWithOptions does (TestNewBackendIsGoXLAs
// compares the two field by field).
func NewBackend(path string, o BackendOptions) (*gomlxxla.Backend, *pjrt.Client, error) {
	if err := Compatible(); err != nil {
		return nil, nil, err
	}
	plugin, err := pjrt.GetPlugin(path)
	if err != nil {
		return nil, nil, err
	}
	options := pjrt.NamedValuesMap{}
	for k, v := range o.Options {
		options[k] = v
	}
	if _, set := options["preallocate"]; !set && pjrt.IsCUDAName(path) {
		options["preallocate"] = false // go-xla's default for CUDA
	}
	client, err := newClient(plugin, options, o)
	if err != nil {
		return nil, nil, err
	}
	b := new(gomlxxla.Backend)
	caps := gomlxxla.Capabilities.Clone()
	if plugin.IsCUDA() {
		caps.Operations[compute.OpTypeFusedScaledDotProductAttention] = true
		caps.Operations[compute.OpTypeFusedScaledDotProductAttentionVJP] = true
	}
	config := path
	if o.SharedBuffers {
		config += ",shared_buffers"
	}
	err = setFields(b, map[string]any{
		"plugin": plugin, "client": client, "config": config, "pluginName": path,
		"hasSharedBuffers": o.SharedBuffers || plugin.IsCPU(), "capabilities": caps,
		"numDevices": len(client.AddressableDevices()),
	})
	if err != nil {
		return nil, nil, errors.Join(err, client.Destroy())
	}
	b.DotGeneralUseTF32 = plugin.IsCUDA()
	return b, client, nil
}

// newClient creates a client of plugin with options and o's key-value
// callbacks, and wraps it as go-xla's newClient does.
func newClient(plugin *pjrt.Plugin, options pjrt.NamedValuesMap, o BackendOptions) (*pjrt.Client, error) {
	api, err := apiField(plugin)
	if err != nil {
		return nil, err
	}
	cOptions, n, err := namedValues(options)
	if err != nil {
		return nil, fmt.Errorf("pjrtx: the client options: %w", err)
	}
	defer C.free(cOptions)
	var handle cgo.Handle
	if o.HasKeyValue {
		handle = cgo.NewHandle(o.KeyValue)
	}
	var cClient *C.PJRT_Client
	if msg := C.pjrtx_create_client((*C.PJRT_Api)(api.UnsafePointer()), (*C.PJRT_NamedValue)(cOptions), C.size_t(n),
		C.uintptr_t(handle), &cClient); msg != nil {
		if handle != 0 {
			handle.Delete()
		}
		return nil, fmt.Errorf("PJRT_Client_Create: %s", takeCString(msg))
	}
	return wrapClient(plugin, unsafe.Pointer(cClient), handle)
}

// wrapClient makes c go-xla's *pjrt.Client, destroyed (and handle
// deleted) when it is collected or destroyed.
func wrapClient(plugin *pjrt.Plugin, c unsafe.Pointer, handle cgo.Handle) (*pjrt.Client, error) {
	client := new(pjrt.Client)
	inner := reflect.ValueOf(client).Elem().FieldByName("client")
	if !inner.IsValid() || inner.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("%w: go-xla's pjrt.Client has no client *clientC field", ErrIncompatible)
	}
	cc := reflect.New(inner.Type().Elem())
	cField := cc.Elem().FieldByName("c")
	if !cField.IsValid() || cField.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("%w: go-xla's clientC has no c pointer field", ErrIncompatible)
	}
	*(*unsafe.Pointer)(unsafe.Pointer(cField.UnsafeAddr())) = c
	if err := setFields(client, map[string]any{"plugin": plugin}); err != nil {
		return nil, err
	}
	reflect.NewAt(inner.Type(), unsafe.Pointer(inner.UnsafeAddr())).Elem().Set(cc)
	ccPtr := cc.UnsafePointer()
	// Once: pjrt.Client.Destroy destroys the C client (a second destroy
	// is go-xla's no-op), but the handle may be deleted only once.
	destroy := sync.OnceFunc(func() {
		_ = destroyClientC(ccPtr, plugin)
		if handle != 0 {
			handle.Delete()
		}
	})
	devices, err := clientAddressableDevices(plugin, client)
	if err != nil {
		destroy()
		return nil, fmt.Errorf("the client's addressable devices: %w", err)
	}
	name, _ := clientPlatformName(plugin, client) // go-xla's newClient: not fatal
	version, _ := clientPlatformVersion(plugin, client)
	index, _ := clientProcessIndex(plugin, client)
	if err := setFields(client, map[string]any{"platform": name, "platformVersion": version, "processIndex": index,
		"addressableDevices": devices}); err != nil {
		destroy()
		return nil, err
	}
	runtime.AddCleanup(client, func(d func()) { d() }, destroy)
	return client, nil
}

// setFields sets unexported fields of the struct p points to, each by
// name and checked to have the value's type.
func setFields(p any, values map[string]any) error {
	v := reflect.ValueOf(p).Elem()
	var missing []string
	for name, value := range values {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Type() != reflect.TypeOf(value) {
			missing = append(missing, fmt.Sprintf("%s %T", name, value))
			continue
		}
		reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(value))
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s has no field %s", ErrIncompatible, v.Type(), strings.Join(missing, ", "))
	}
	return nil
}
