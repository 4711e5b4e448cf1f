package pjrtx

/*
#include <stdint.h>
#include <stdlib.h>
#include "pjrt_c_api.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"time"
	"unsafe"
)

// KeyValue is the store a PJRT client's distributed runtime shares
// values through across a job's processes (PJRT_Client_Create's
// key-value callbacks): NCCL's unique ids, topologies. Get waits for the
// key; TryGet does not (found false: no such key).
type KeyValue interface {
	Get(ctx context.Context, key string) ([]byte, error)
	TryGet(ctx context.Context, key string) (value []byte, found bool, err error)
	Put(ctx context.Context, key string, value []byte) error
}

// MaxKVKey and MaxKVValue bound what the plugin hands the callbacks; the
// store may bound values tighter.
const (
	MaxKVKey   = 4096
	MaxKVValue = 64 << 20
)

// maxKVWait bounds a Get whose plugin gave no timeout, or a longer one.
const maxKVWait = 30 * time.Minute

// errKVKey: the plugin gave a key the callbacks refuse.
var errKVKey = errors.New("pjrtx: key-value callback: key empty or over 4096 bytes")

// kvArgs is a callback's store and key; a code other than 0 (with *msg
// set) where either is not to be had.
func kvArgs(handle C.uintptr_t, key *C.char, size C.size_t, msg **C.char) (KeyValue, string, C.int) {
	kv, ok := cgo.Handle(handle).Value().(KeyValue)
	if !ok {
		return nil, "", kvFail(errors.New("pjrtx: key-value callback with no store"), msg)
	}
	if key == nil || size == 0 || size > MaxKVKey {
		return nil, "", kvFail(errKVKey, msg)
	}
	return kv, C.GoStringN(key, C.int(size)), 0
}

// kvFail writes err's message into *msg (malloc'ed) and returns its PJRT code.
func kvFail(err error, msg **C.char) C.int {
	*msg = C.CString(err.Error())
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return C.PJRT_Error_Code_DEADLINE_EXCEEDED
	case errors.Is(err, errKVKey), errors.Is(err, ErrKVRefused):
		return C.PJRT_Error_Code_INVALID_ARGUMENT
	default:
		return C.PJRT_Error_Code_INTERNAL
	}
}

// ErrKVRefused: the store holds a value under the key that the callbacks
// will not hand the plugin (too large, or not written by this job's
// callbacks); a store wraps it.
var ErrKVRefused = errors.New("pjrtx: key-value value refused")

// kvValue copies value into *out (malloc'ed; the plugin frees it through
// the deleter kv.c sets).
func kvValue(value []byte, out **C.char, size *C.size_t) {
	*out = (*C.char)(C.malloc(C.size_t(max(len(value), 1))))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(*out)), len(value)), value)
	*size = C.size_t(len(value))
}

//export pjrtxKVGet
func pjrtxKVGet(handle C.uintptr_t, key *C.char, keySize C.size_t, timeoutMS C.int, value **C.char, valueSize *C.size_t, msg **C.char) C.int {
	kv, k, code := kvArgs(handle, key, keySize, msg)
	if code != 0 {
		return code
	}
	wait := maxKVWait
	if timeoutMS > 0 {
		wait = min(wait, time.Duration(timeoutMS)*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, err := kv.Get(ctx, k)
	if err != nil {
		return kvFail(fmt.Errorf("pjrtx: key-value get %q (waited up to %s): %w", k, wait, err), msg)
	}
	kvValue(v, value, valueSize)
	return 0
}

//export pjrtxKVTryGet
func pjrtxKVTryGet(handle C.uintptr_t, key *C.char, keySize C.size_t, value **C.char, valueSize *C.size_t, msg **C.char) C.int {
	kv, k, code := kvArgs(handle, key, keySize, msg)
	if code != 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, found, err := kv.TryGet(ctx, k)
	switch {
	case err != nil:
		return kvFail(fmt.Errorf("pjrtx: key-value try-get %q: %w", k, err), msg)
	case !found:
		*msg = C.CString(fmt.Sprintf("pjrtx: key-value try-get %q: not found", k))
		return C.PJRT_Error_Code_NOT_FOUND
	}
	kvValue(v, value, valueSize)
	return 0
}

//export pjrtxKVPut
func pjrtxKVPut(handle C.uintptr_t, key *C.char, keySize C.size_t, value *C.char, valueSize C.size_t, msg **C.char) C.int {
	kv, k, code := kvArgs(handle, key, keySize, msg)
	if code != 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if valueSize > MaxKVValue {
		return kvFail(fmt.Errorf("pjrtx: key-value put %q: %w: %d bytes, over %d", k, ErrKVRefused, valueSize, MaxKVValue), msg)
	}
	v := C.GoBytes(unsafe.Pointer(value), C.int(valueSize))
	if err := kv.Put(ctx, k, v); err != nil {
		return kvFail(fmt.Errorf("pjrtx: key-value put %q (%d bytes): %w", k, len(v), err), msg)
	}
	return 0
}
