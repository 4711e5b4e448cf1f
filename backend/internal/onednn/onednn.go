package onednn

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -O2
#include <stdlib.h>
#include "conv.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// DefaultLibrary is the soname of oneDNN 2.x.
const DefaultLibrary = "libdnnl.so.2"

// Handler is an XLA FFI handler (an XLA_FFI_Handler*) and the custom-call
// target it serves.
type Handler struct {
	Target string
	Fn     unsafe.Pointer
}

var loaded struct {
	once    sync.Once
	path    string
	version string
	err     error
}

// Load opens oneDNN from path (DefaultLibrary when empty) once per
// process and returns its version ("2.6.3"); a later call with another
// path gets the first call's answer.
func Load(path string) (version string, err error) {
	if path == "" {
		path = DefaultLibrary
	}
	loaded.once.Do(func() {
		loaded.path = path
		cPath := C.CString(path)
		defer C.free(unsafe.Pointer(cPath))
		var cVersion, cErr *C.char
		failed := C.onednn_load(cPath, &cVersion, &cErr) != 0
		if cVersion != nil {
			loaded.version = C.GoString(cVersion)
			C.free(unsafe.Pointer(cVersion))
		}
		if failed {
			loaded.err = fmt.Errorf("oneDNN (%s): %s", path, C.GoString(cErr))
			C.free(unsafe.Pointer(cErr))
		}
	})
	return loaded.version, loaded.err
}

// Handlers are the convolution handlers, for the custom-call targets
// Rewrite emits. Call them only after Load succeeded.
func Handlers() []Handler {
	return []Handler{
		{TargetForward, C.onednn_conv_forward_handler()},
		{TargetInputGrad, C.onednn_conv_input_grad_handler()},
		{TargetWeightGrad, C.onednn_conv_weight_grad_handler()},
	}
}

// Pass is what one convolution pass ran through oneDNN so far: calls,
// time in the handler (weight reorders included) and floating-point
// operations.
type Pass struct {
	Calls int
	Time  time.Duration
	FLOP  float64
}

// Calls is what each pass ran: forward, input gradient, weight gradient.
func Calls() [3]Pass {
	var out [3]Pass
	for i := range out {
		var count, ns, flop C.ulonglong
		C.onednn_calls(C.int(i), &count, &ns, &flop)
		out[i] = Pass{Calls: int(count), Time: time.Duration(ns), FLOP: float64(flop)}
	}
	return out
}

// SetThreads sets the threads each convolution may use; 0 leaves it to
// OpenMP (OMP_NUM_THREADS, else every core). Replicas that run their
// programs at once share the cores: each gets its part.
func SetThreads(n int) { C.onednn_set_threads(C.int(max(n, 0))) }
