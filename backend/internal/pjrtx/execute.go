package pjrtx

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"
#include "pjrtx_error.h"

// pjrtx_execute starts exec on num_devices × num_args inputs (device-major)
// without waiting: outs receives num_devices × num_outputs buffers, which
// PJRT fills in when the execution finishes, and events one completion
// event per device. The argument positions in keep (num_keep of them) are
// not donated; the others are, on every device.
static char* pjrtx_execute(const PJRT_Api* api, PJRT_LoadedExecutable* exec, size_t num_devices, size_t num_args,
		PJRT_Buffer** args, size_t num_outputs, PJRT_Buffer** outs, PJRT_Event** events,
		const int64_t* keep, size_t num_keep) {
	PJRT_Buffer*** arg_lists = malloc(sizeof(PJRT_Buffer**) * num_devices);
	PJRT_Buffer*** out_lists = malloc(sizeof(PJRT_Buffer**) * num_devices);
	for (size_t d = 0; d < num_devices; d++) {
		arg_lists[d] = args + d * num_args;
		out_lists[d] = outs + d * num_outputs;
	}
	PJRT_ExecuteOptions opts;
	memset(&opts, 0, sizeof(opts));
	opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
	opts.num_non_donatable_input_indices = num_keep;
	opts.non_donatable_input_indices = keep;
	PJRT_LoadedExecutable_Execute_Args a;
	memset(&a, 0, sizeof(a));
	a.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
	a.executable = exec;
	a.options = &opts;
	a.argument_lists = (PJRT_Buffer* const* const*)arg_lists;
	a.num_devices = num_devices;
	a.num_args = num_args;
	a.output_lists = (PJRT_Buffer** const*)out_lists;
	a.device_complete_events = events;
	PJRT_Error* e = api->PJRT_LoadedExecutable_Execute(&a);
	free(arg_lists);
	free(out_lists);
	return e != NULL ? pjrtx_take_error(api, e) : NULL;
}

// pjrtx_await waits for ev, destroys it, and returns its error, if any.
static char* pjrtx_await(const PJRT_Api* api, PJRT_Event* ev) {
	PJRT_Event_Await_Args a;
	memset(&a, 0, sizeof(a));
	a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
	a.event = ev;
	PJRT_Error* e = api->PJRT_Event_Await(&a);
	PJRT_Event_Destroy_Args d;
	memset(&d, 0, sizeof(d));
	d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
	d.event = ev;
	api->PJRT_Event_Destroy(&d);
	return e != NULL ? pjrtx_take_error(api, e) : NULL;
}

// pjrtx_await_ready waits until buf's value is computed and returns the
// error of the computation that defines it, if any.
static char* pjrtx_await_ready(const PJRT_Api* api, PJRT_Buffer* buf) {
	PJRT_Buffer_ReadyEvent_Args a;
	memset(&a, 0, sizeof(a));
	a.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
	a.buffer = buf;
	PJRT_Error* e = api->PJRT_Buffer_ReadyEvent(&a);
	if (e != NULL) return pjrtx_take_error(api, e);
	return pjrtx_await(api, a.event);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/go-xla/pjrt"
)

// newBuffer is go-xla's own buffer constructor: it wraps a C buffer and
// registers the cleanup that destroys it.
//
//go:linkname newBuffer github.com/gomlx/go-xla/pjrt.newBuffer
func newBuffer(client *pjrt.Client, c unsafe.Pointer) *pjrt.Buffer

// bufferLayout is where a *pjrt.Buffer keeps its C buffer
// (Buffer.wrapper.c), read once with type checks so that every execution
// reads it with two loads.
var bufferLayout = sync.OnceValues(func() ([2]uintptr, error) {
	wrapper, ok := reflect.TypeFor[pjrt.Buffer]().FieldByName("wrapper")
	if !ok || wrapper.Type.Kind() != reflect.Pointer {
		return [2]uintptr{}, fmt.Errorf("pjrt.Buffer has no wrapper pointer: not the pinned go-xla %s", pinnedGoXLA)
	}
	c, ok := wrapper.Type.Elem().FieldByName("c")
	if !ok || c.Type.Kind() != reflect.Pointer {
		return [2]uintptr{}, fmt.Errorf("pjrt.Buffer's wrapper has no C pointer: not the pinned go-xla %s", pinnedGoXLA)
	}
	return [2]uintptr{wrapper.Offset, c.Offset}, nil
})

func cBuffer(b *pjrt.Buffer, layout [2]uintptr) (unsafe.Pointer, error) {
	if b == nil {
		return nil, errors.New("nil input buffer")
	}
	wrapper := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(b), layout[0]))
	if wrapper == nil {
		return nil, errors.New("input buffer was destroyed")
	}
	c := *(*unsafe.Pointer)(unsafe.Add(wrapper, layout[1]))
	if c == nil {
		return nil, errors.New("input buffer was destroyed")
	}
	return c, nil
}

// Execution is a program running on its devices.
type Execution struct {
	api    *C.PJRT_Api
	events []*C.PJRT_Event
	once   sync.Once
	err    error
	// keep holds whatever must outlive the execution (its inputs' owners).
	keep any
}

// Execute starts e on numDevices devices with inputs given device-major
// and returns at once: the outputs (device-major) become ready when the
// execution finishes, and reading one waits for it, as JAX and torch-xla
// dispatch. keep is held until Wait returns (the owners of the inputs,
// which must not be freed while the program reads them). donate, nil or
// one entry per argument position, donates those inputs on every device:
// the caller guarantees nothing reads them again.
func Execute(e *pjrt.LoadedExecutable, numDevices int, inputs []*pjrt.Buffer, donate []bool, keep any) ([]*pjrt.Buffer, *Execution, error) {
	if err := Compatible(); err != nil {
		return nil, nil, err
	}
	layout, err := bufferLayout()
	if err != nil {
		return nil, nil, err
	}
	if numDevices < 1 || len(inputs)%numDevices != 0 {
		return nil, nil, fmt.Errorf("executing: %d inputs for %d devices", len(inputs), numDevices)
	}
	numArgs := len(inputs) / numDevices
	if donate != nil && len(donate) != numArgs {
		return nil, nil, fmt.Errorf("executing: %d donation flags for %d arguments", len(donate), numArgs)
	}
	cExec, api, client, err := executablePointers(e)
	if err != nil {
		return nil, nil, err
	}
	numOutputs := e.NumOutputs
	n := numDevices * numOutputs
	// C arrays: PJRT keeps no pointer to them past the call.
	argsMem := cArray[*C.PJRT_Buffer](len(inputs))
	defer C.free(unsafe.Pointer(argsMem))
	outsMem := cArray[*C.PJRT_Buffer](n)
	defer C.free(unsafe.Pointer(outsMem))
	eventsMem := cArray[*C.PJRT_Event](numDevices)
	defer C.free(unsafe.Pointer(eventsMem))
	keepMem := cArray[C.int64_t](numArgs)
	defer C.free(unsafe.Pointer(keepMem))
	kept := keptArgs(keepMem, numArgs, donate)
	if err := fillArgs(argsMem, inputs, layout); err != nil {
		return nil, nil, err
	}
	if msg := C.pjrtx_execute((*C.PJRT_Api)(api), (*C.PJRT_LoadedExecutable)(cExec), C.size_t(numDevices),
		C.size_t(numArgs), argsMem, C.size_t(numOutputs), outsMem, eventsMem, keepMem, C.size_t(kept)); msg != nil {
		return nil, nil, fmt.Errorf("PJRT_LoadedExecutable_Execute: %s", takeCString(msg))
	}
	events := unsafe.Slice(eventsMem, numDevices)
	outs := unsafe.Slice(outsMem, n)
	x := &Execution{api: (*C.PJRT_Api)(api), events: append([]*C.PJRT_Event(nil), events...), keep: keep}
	out := make([]*pjrt.Buffer, n)
	for i, c := range outs {
		out[i] = newBuffer((*pjrt.Client)(client), unsafe.Pointer(c))
	}
	return out, x, nil
}

// executablePointers reads e's C executable, its plugin's API table and
// its client from go-xla's unexported fields.
func executablePointers(e *pjrt.LoadedExecutable) (cExec, api, client unsafe.Pointer, err error) {
	if cExec, err = pointerField(e, "wrapper", "c"); err != nil {
		return nil, nil, nil, fmt.Errorf("executing: %w", err)
	}
	if api, err = pointerField(e, "plugin", "api"); err != nil {
		return nil, nil, nil, fmt.Errorf("executing: %w", err)
	}
	if client, err = pointerField(e, "client"); err != nil {
		return nil, nil, nil, fmt.Errorf("executing: %w", err)
	}
	return cExec, api, client, nil
}

// keptArgs writes into keepMem (numArgs long) the argument positions not
// donated and returns how many it wrote.
func keptArgs(keepMem *C.int64_t, numArgs int, donate []bool) int {
	kept := unsafe.Slice(keepMem, max(numArgs, 1))[:0]
	for i := range numArgs {
		if donate == nil || !donate[i] {
			kept = append(kept, C.int64_t(i))
		}
	}
	return len(kept)
}

// fillArgs writes the inputs' C buffers into argsMem (len(inputs) long).
func fillArgs(argsMem **C.PJRT_Buffer, inputs []*pjrt.Buffer, layout [2]uintptr) error {
	args := unsafe.Slice(argsMem, len(inputs))
	for i, b := range inputs {
		c, err := cBuffer(b, layout)
		if err != nil {
			return fmt.Errorf("executing: input %d: %w", i, err)
		}
		args[i] = (*C.PJRT_Buffer)(c)
	}
	return nil
}

// Wait blocks until the execution finished on every device and returns
// its first error. It is safe to call more than once, from any goroutine.
func (x *Execution) Wait() error {
	x.once.Do(func() {
		for _, ev := range x.events {
			if ev == nil {
				continue
			}
			if msg := C.pjrtx_await(x.api, ev); msg != nil && x.err == nil {
				x.err = errors.New(takeCString(msg))
			}
		}
		x.events, x.keep = nil, nil
	})
	return x.err
}

// cArray mallocs room for n values of T (at least one, so it is never NULL).
func cArray[T any](n int) *T {
	var zero T
	return (*T)(C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof(zero))))
}

// AwaitReady blocks until b's value is computed (it may be the output of
// an execution still running) and returns that computation's error. GoMLX
// reads CPU buffers through their memory directly, which does not wait.
func AwaitReady(b *pjrt.Buffer) error {
	layout, err := bufferLayout()
	if err != nil {
		return err
	}
	c, err := cBuffer(b, layout)
	if err != nil {
		return err
	}
	api, err := pointerField(b, "wrapper", "plugin", "api")
	if err != nil {
		return err
	}
	if msg := C.pjrtx_await_ready((*C.PJRT_Api)(api), (*C.PJRT_Buffer)(c)); msg != nil {
		return errors.New(takeCString(msg))
	}
	return nil
}
