package pjrtx

/*
#include <stdlib.h>
#include <string.h>
#include "compilehook.h"
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

// A ProgramRewriter turns a StableHLO program (MLIR text) into the one
// compiled instead; ok false compiles program as it is.
type ProgramRewriter func(program []byte) (rewritten []byte, ok bool)

var (
	hookMu   sync.Mutex
	hooked   *pjrt.Plugin // the plugin whose API table was swapped
	rewriter ProgramRewriter
)

// RewritePrograms makes every program compiled through plugin pass through
// rewrite first (nil: none is rewritten). GoMLX v0.26.0 builds and
// compiles a program in one call and go-xla v0.1.4 has no custom-call op,
// so the rewrite happens where the program meets the plugin: go-xla's
// plugin gets a copy of the plugin's API table whose PJRT_Client_Compile
// rewrites, then calls the plugin's. One plugin per process is hooked.
func RewritePrograms(plugin *pjrt.Plugin, rewrite ProgramRewriter) error {
	if err := Compatible(); err != nil {
		return err
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if hooked != nil && hooked != plugin {
		return fmt.Errorf("pjrtx: programs of %s are already rewritten; one plugin per process", hooked.Path())
	}
	if hooked == nil {
		field, err := apiField(plugin)
		if err != nil {
			return err
		}
		api := C.pjrtx_hooked_api((*C.PJRT_Api)(field.UnsafePointer()))
		if api == nil {
			return fmt.Errorf("pjrtx: %s's API table is too small to hold PJRT_Client_Compile", plugin.Path())
		}
		reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().
			Set(reflect.NewAt(field.Type().Elem(), unsafe.Pointer(api)))
		hooked = plugin
	}
	rewriter = rewrite
	return nil
}

// apiField is go-xla's Plugin.api, the plugin's PJRT_Api table.
func apiField(plugin *pjrt.Plugin) (reflect.Value, error) {
	field := reflect.ValueOf(plugin).Elem().FieldByName("api")
	if !field.IsValid() || field.Kind() != reflect.Pointer || field.IsNil() {
		return field, errors.New("pjrtx: go-xla's Plugin has no API table field named api: this go-xla is not the pinned " + pinnedGoXLA)
	}
	return field, nil
}

//export pjrtxRewriteProgram
func pjrtxRewriteProgram(code *C.char, size C.size_t, out **C.char, outSize *C.size_t) C.int {
	hookMu.Lock()
	rewrite := rewriter
	hookMu.Unlock()
	if rewrite == nil {
		return 0
	}
	program := C.GoBytes(unsafe.Pointer(code), C.int(size))
	rewritten, ok := rewrite(program)
	if !ok {
		return 0
	}
	buf := C.malloc(C.size_t(len(rewritten)))
	copy(unsafe.Slice((*byte)(buf), len(rewritten)), rewritten)
	*out, *outSize = (*C.char)(buf), C.size_t(len(rewritten))
	return 1
}
