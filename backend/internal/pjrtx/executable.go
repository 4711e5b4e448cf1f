package pjrtx

/*
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"
#include "pjrtx_error.h"

// serialize_loaded copies the serialized form of loaded into *out (malloc'ed).
static char* serialize_loaded(const PJRT_Api* api, PJRT_LoadedExecutable* loaded, char** out, size_t* size) {
	PJRT_LoadedExecutable_GetExecutable_Args gargs;
	memset(&gargs, 0, sizeof(gargs));
	gargs.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
	gargs.loaded_executable = loaded;
	PJRT_Error* e = api->PJRT_LoadedExecutable_GetExecutable(&gargs);
	if (e != NULL) return pjrtx_take_error(api, e);

	PJRT_Executable_Serialize_Args sargs;
	memset(&sargs, 0, sizeof(sargs));
	sargs.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
	sargs.executable = gargs.executable;
	e = api->PJRT_Executable_Serialize(&sargs);
	char* err = NULL;
	if (e != NULL) {
		err = pjrtx_take_error(api, e);
	} else {
		*size = sargs.serialized_bytes_size;
		*out = malloc(*size > 0 ? *size : 1);
		memcpy(*out, sargs.serialized_bytes, *size);
		sargs.serialized_executable_deleter(sargs.serialized_executable);
	}
	PJRT_Executable_Destroy_Args dargs;
	memset(&dargs, 0, sizeof(dargs));
	dargs.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
	dargs.executable = gargs.executable;
	api->PJRT_Executable_Destroy(&dargs);
	return err;
}

static char* deserialize_and_load(const PJRT_Api* api, PJRT_Client* client, const char* data, size_t size,
		PJRT_LoadedExecutable** loaded) {
	PJRT_Executable_DeserializeAndLoad_Args args;
	memset(&args, 0, sizeof(args));
	args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
	args.client = client;
	args.serialized_executable = data;
	args.serialized_executable_size = size;
	PJRT_Error* e = api->PJRT_Executable_DeserializeAndLoad(&args);
	if (e != NULL) return pjrtx_take_error(api, e);
	*loaded = args.loaded_executable;
	return NULL;
}
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/gomlx/core/graph"
)

// newLoadedExecutable is go-xla's own constructor: it wraps a C executable,
// reads its name and outputs, and registers its cleanup. go-xla (v0.4.13) has
// no deserialization, so a deserialized executable goes through it.
//
//go:linkname newLoadedExecutable github.com/gomlx/go-xla/pjrt.newLoadedExecutable
func newLoadedExecutable(plugin *pjrt.Plugin, client *pjrt.Client, c unsafe.Pointer) (*pjrt.LoadedExecutable, error)

// field returns the named field of the struct *p points to, failing loudly
// if a dependency upgrade renamed it.
func field(p any, name string) (reflect.Value, error) {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return reflect.Value{}, fmt.Errorf("reading %s: nil %T", name, p)
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() {
		return reflect.Value{}, fmt.Errorf("%T has no field %q: not the pinned GoMLX %s / go-xla %s", p, name, pinnedGoMLX, pinnedGoXLA)
	}
	return f, nil
}

// pointerField reads a pointer-typed field, following a chain of names.
func pointerField(p any, names ...string) (unsafe.Pointer, error) {
	cur := reflect.ValueOf(p)
	for _, name := range names {
		if cur.Kind() != reflect.Pointer || cur.IsNil() {
			return nil, fmt.Errorf("reading %s: nil pointer", name)
		}
		f := cur.Elem().FieldByName(name)
		if !f.IsValid() {
			return nil, fmt.Errorf("%s has no field %q: not the pinned GoMLX %s / go-xla %s", cur.Type(), name, pinnedGoMLX, pinnedGoXLA)
		}
		if f.Kind() == reflect.Interface {
			f = f.Elem()
		}
		cur = f
	}
	if cur.Kind() != reflect.Pointer || cur.IsNil() {
		return nil, fmt.Errorf("field %v is nil", names)
	}
	return cur.UnsafePointer(), nil
}

// LoadedExecutableOf returns the PJRT executable of a compiled GoMLX graph
// on the XLA backend.
func LoadedExecutableOf(g *graph.Graph) (*pjrt.LoadedExecutable, error) {
	if g == nil || !g.IsCompiled() {
		return nil, errors.New("the GoMLX graph is not compiled")
	}
	// Every step is type-checked, so any GoMLX version is read safely.
	wrong := fmt.Errorf("GoMLX's compiled graph holds no *pjrt.LoadedExecutable at executable.exec: not the pinned GoMLX %s", pinnedGoMLX)
	exec := reflect.ValueOf(g).Elem().FieldByName("executable")
	if exec.Kind() == reflect.Interface {
		exec = exec.Elem()
	}
	if exec.Kind() != reflect.Pointer || exec.IsNil() || exec.Elem().Kind() != reflect.Struct {
		return nil, wrong
	}
	inner := exec.Elem().FieldByName("exec")
	if inner.Kind() == reflect.Interface {
		inner = inner.Elem()
	}
	if !inner.IsValid() || inner.Type() != reflect.TypeFor[*pjrt.LoadedExecutable]() || inner.IsNil() {
		return nil, wrong
	}
	return (*pjrt.LoadedExecutable)(inner.UnsafePointer()), nil
}

// Serialize returns the plugin's serialized form of e (PJRT_Executable_Serialize).
func Serialize(e *pjrt.LoadedExecutable) ([]byte, error) {
	if err := Compatible(); err != nil {
		return nil, err
	}
	cLoaded, err := pointerField(e, "wrapper", "c")
	if err != nil {
		return nil, fmt.Errorf("serializing: %w", err)
	}
	api, err := pointerField(e, "plugin", "api")
	if err != nil {
		return nil, fmt.Errorf("serializing: %w", err)
	}
	var out *C.char
	var size C.size_t
	if msg := C.serialize_loaded((*C.PJRT_Api)(api), (*C.PJRT_LoadedExecutable)(cLoaded), &out, &size); msg != nil {
		return nil, fmt.Errorf("PJRT_Executable_Serialize: %s", takeCString(msg))
	}
	defer C.free(unsafe.Pointer(out))
	// Copied with a 64-bit length: C.GoBytes takes a C int, which
	// truncates executables over 2 GiB.
	return bytes.Clone(unsafe.Slice((*byte)(unsafe.Pointer(out)), uint64(size))), nil
}

// Deserialize loads a serialized executable on client, set up to run as
// SPMD over numReplicas devices with the given device assignment, as the
// compile that produced it was.
func Deserialize(client *pjrt.Client, data []byte, numReplicas int, deviceAssignment []int) (*pjrt.LoadedExecutable, error) {
	if err := Compatible(); err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, errors.New("deserializing: empty executable")
	}
	cClient, err := pointerField(client, "client", "c")
	if err != nil {
		return nil, fmt.Errorf("deserializing: %w", err)
	}
	api, err := pointerField(client.Plugin(), "api")
	if err != nil {
		return nil, fmt.Errorf("deserializing: %w", err)
	}
	cData := C.CBytes(data)
	defer C.free(cData)
	var loaded *C.PJRT_LoadedExecutable
	if msg := C.deserialize_and_load((*C.PJRT_Api)(api), (*C.PJRT_Client)(cClient), (*C.char)(cData), C.size_t(len(data)), &loaded); msg != nil {
		return nil, fmt.Errorf("PJRT_Executable_DeserializeAndLoad: %s", takeCString(msg))
	}
	e, err := newLoadedExecutable(client.Plugin(), client, unsafe.Pointer(loaded))
	if err != nil {
		return nil, fmt.Errorf("wrapping the deserialized executable: %w", err)
	}
	// What go-xla's compile records for an SPMD executable.
	for name, value := range map[string]any{
		"numReplicas": numReplicas, "numPartitions": 1, "deviceAssignment": append([]int(nil), deviceAssignment...),
	} {
		f, err := field(e, name)
		if err != nil {
			return nil, err
		}
		reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(value))
	}
	return e, nil
}
