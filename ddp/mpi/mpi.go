//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdint.h>
#include <string.h>

static MPI_Comm xw_comm_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm xw_comm_null(void) { return MPI_COMM_NULL; }
static MPI_Datatype xw_float(void) { return MPI_FLOAT; }
static MPI_Datatype xw_double(void) { return MPI_DOUBLE; }
static MPI_Datatype xw_int32(void) { return MPI_INT32_T; }
static MPI_Datatype xw_int64(void) { return MPI_INT64_T; }
static MPI_Datatype xw_uint16(void) { return MPI_UINT16_T; }
static MPI_Op xw_sum(void) { return MPI_SUM; }
static MPI_Op xw_min(void) { return MPI_MIN; }
static MPI_Op xw_max(void) { return MPI_MAX; }
static MPI_Op xw_prod(void) { return MPI_PROD; }
static int xw_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }
static int xw_tag_ub(MPI_Comm c, int *ub) {
	int *v, flag, err = MPI_Comm_get_attr(c, MPI_TAG_UB, &v, &flag);
	*ub = (err == MPI_SUCCESS && flag) ? *v : 32767;
	return err;
}
static int xw_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }
static int xw_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
static int xw_thread_funneled(void) { return MPI_THREAD_FUNNELED; }

// bfloat16 arithmetic: widen to float, combine, round to nearest even
// (NaN stays a quiet NaN), as ddp's own reduction does.
static inline float bf16_to_f32(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t f32_to_bf16(float f) {
	uint32_t u; memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}
#define BF16_OP(name, expr) \
	static void name(void *in, void *inout, int *len, MPI_Datatype *dt) { \
		uint16_t *a = (uint16_t *)in, *b = (uint16_t *)inout; \
		for (int i = 0; i < *len; i++) { float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]); b[i] = f32_to_bf16(expr); } \
	}
BF16_OP(bf16_sum, x + y)
BF16_OP(bf16_prod, x * y)
BF16_OP(bf16_min, (x < y || x != x) ? x : y)
BF16_OP(bf16_max, (x > y || x != x) ? x : y)
static int xw_bf16_ops(MPI_Op ops[4]) {
	int err;
	if ((err = MPI_Op_create(bf16_sum, 1, &ops[0])) != MPI_SUCCESS) return err;
	if ((err = MPI_Op_create(bf16_min, 1, &ops[1])) != MPI_SUCCESS) return err;
	if ((err = MPI_Op_create(bf16_max, 1, &ops[2])) != MPI_SUCCESS) return err;
	return MPI_Op_create(bf16_prod, 1, &ops[3]);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/xladdp/xladdp/internal/knobs"
)

// Error is a failed MPI call: the call, its error code and MPI's string.
type Error struct {
	Call string
	Code int
	Text string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (MPI error %d)", e.Call, e.Text, e.Code) }

// check turns an MPI return code into an *Error.
func check(call string, code C.int) error {
	if code == C.MPI_SUCCESS {
		return nil
	}
	return &Error{Call: call, Code: int(code), Text: ErrorString(int(code))}
}

// do runs one MPI call, f, and turns its code into an *Error: on the
// caller's thread under MPI_THREAD_MULTIPLE, else on MPI's main thread
// (which also serialises the calls).
func do(name string, f func() C.int) error {
	if direct {
		return check(name, f())
	}
	var code C.int
	onMain(func() { code = f() })
	return check(name, code)
}

// ErrorString is MPI_Error_string.
func ErrorString(code int) string {
	buf := make([]byte, C.MPI_MAX_ERROR_STRING)
	var n C.int
	if C.MPI_Error_string(C.int(code), (*C.char)(unsafe.Pointer(&buf[0])), &n) != C.MPI_SUCCESS {
		return fmt.Sprintf("unknown MPI error %d", code)
	}
	return string(buf[:n])
}

// ThreadLevel is what MPI_Init_thread provided.
type ThreadLevel int

// The thread levels ddp cares about.
var (
	ThreadFunneled   = ThreadLevel(C.xw_thread_funneled())
	ThreadSerialized = ThreadLevel(C.xw_thread_serialized())
	ThreadMultiple   = ThreadLevel(C.xw_thread_multiple())
)

// ParseThreadLevel reads a thread level by its MPI name: "multiple",
// "serialized" or "funneled" (MPI_THREAD_ prefix and case optional).
func ParseThreadLevel(s string) (ThreadLevel, error) {
	level, err := knobs.MPIThreads(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("mpi: %w", err)
	case level == "serialized":
		return ThreadSerialized, nil
	case level == "funneled":
		return ThreadFunneled, nil
	}
	return ThreadMultiple, nil
}

func (l ThreadLevel) String() string {
	switch l {
	case ThreadMultiple:
		return "MPI_THREAD_MULTIPLE"
	case ThreadSerialized:
		return "MPI_THREAD_SERIALIZED"
	case ThreadFunneled:
		return "MPI_THREAD_FUNNELED"
	}
	return fmt.Sprintf("MPI thread level %d", int(l))
}

var (
	initMu    sync.Mutex
	started   bool
	finalized bool
	initErr   error
	level     ThreadLevel
	bf16Ops   [4]C.MPI_Op
	// mainCalls is the queue of MPI's main thread: the goroutine, locked
	// to its OS thread, that called MPI_Init_thread. MPI_Finalize must
	// run there, and below MPI_THREAD_MULTIPLE every call does.
	mainCalls chan func()
	// direct: MPI provided MPI_THREAD_MULTIPLE, so calls run on the
	// caller's thread without a hand-off.
	direct bool
)

// Init calls MPI_Init_thread asking for required (ThreadMultiple unless
// a fabric runs faster with less), once per process, and returns the
// level MPI provided. Below ThreadMultiple every later call runs on the
// one goroutine, locked to its OS thread, that initialised MPI; that
// goroutine lives until Finalize, as MPI's main thread must. Errors on
// MPI_COMM_WORLD are returned, not fatal. MPI cannot start again after
// Finalize: a later Init is an error.
func Init(required ThreadLevel) (ThreadLevel, error) {
	initMu.Lock()
	defer initMu.Unlock()
	if finalized {
		return 0, errors.New("mpi: MPI_Finalize already ran in this process, and MPI cannot be initialised twice: " +
			"keep one process group for the whole run")
	}
	if started {
		return level, initErr
	}
	started = true
	mainCalls = make(chan func())
	ready := make(chan struct{})
	go mainThread(required, ready)
	<-ready
	return level, initErr
}

// mainThread initialises MPI on its own locked OS thread and then runs
// the calls handed to it until Finalize closes mainCalls.
func mainThread(required ThreadLevel, ready chan<- struct{}) {
	// Never unlocked: when the goroutine ends, so does the thread MPI knew.
	runtime.LockOSThread()
	initErr = initialise(required)
	close(ready)
	if initErr != nil {
		return
	}
	for f := range mainCalls {
		f()
	}
}

func initialise(required ThreadLevel) error {
	var provided C.int
	if err := check("MPI_Init_thread", C.MPI_Init_thread(nil, nil, C.int(required), &provided)); err != nil {
		return err
	}
	level = ThreadLevel(provided)
	direct = level >= ThreadMultiple
	if err := check("MPI_Comm_set_errhandler", C.xw_errors_return(C.xw_comm_world())); err != nil {
		return err
	}
	return check("MPI_Op_create", C.xw_bf16_ops(&bf16Ops[0]))
}

// onMain runs f on MPI's main thread and waits for it.
func onMain(f func()) {
	done := make(chan struct{})
	mainCalls <- func() {
		defer close(done)
		f()
	}
	<-done
}

// Finalize is MPI_Finalize, on MPI's main thread, which then ends; after
// it no MPI call may be made.
func Finalize() error {
	initMu.Lock()
	defer initMu.Unlock()
	if !started || initErr != nil || finalized {
		return nil
	}
	finalized = true
	var err error
	onMain(func() { err = check("MPI_Finalize", C.MPI_Finalize()) })
	close(mainCalls)
	return err
}

// Abort is MPI_Abort on MPI_COMM_WORLD: the whole job ends with code. It
// is called from whichever thread notices the failure, whatever the
// thread level: the main thread may be stuck in the very call that
// failed to finish, and Open MPI's abort only signals its runtime.
func Abort(code int) { C.MPI_Abort(C.xw_comm_world(), C.int(code)) }

// Comm is a communicator.
type Comm struct{ c C.MPI_Comm }

// World is MPI_COMM_WORLD.
func World() Comm { return Comm{C.xw_comm_world()} }

// Dup is MPI_Comm_dup, with errors returned on the copy.
func (c Comm) Dup() (Comm, error) {
	var out C.MPI_Comm
	if err := do("MPI_Comm_dup", func() C.int { return C.MPI_Comm_dup(c.c, &out) }); err != nil {
		return Comm{}, err
	}
	if err := do("MPI_Comm_set_errhandler", func() C.int { return C.xw_errors_return(out) }); err != nil {
		return Comm{}, err
	}
	return Comm{out}, nil
}

// SplitShared is MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the ranks on
// this node.
func (c Comm) SplitShared(key int) (Comm, error) {
	var out C.MPI_Comm
	err := do("MPI_Comm_split_type", func() C.int {
		return C.MPI_Comm_split_type(c.c, C.MPI_COMM_TYPE_SHARED, C.int(key), C.MPI_INFO_NULL, &out)
	})
	return Comm{out}, err
}

// Free is MPI_Comm_free.
func (c *Comm) Free() error {
	if c.c == C.xw_comm_null() {
		return nil
	}
	return do("MPI_Comm_free", func() C.int { return C.MPI_Comm_free(&c.c) })
}

// Rank is MPI_Comm_rank.
func (c Comm) Rank() (int, error) {
	var r C.int
	err := do("MPI_Comm_rank", func() C.int { return C.MPI_Comm_rank(c.c, &r) })
	return int(r), err
}

// Size is MPI_Comm_size.
func (c Comm) Size() (int, error) {
	var n C.int
	err := do("MPI_Comm_size", func() C.int { return C.MPI_Comm_size(c.c, &n) })
	return int(n), err
}

// TagUB is the communicator's MPI_TAG_UB: the largest tag it carries.
func (c Comm) TagUB() (int, error) {
	var ub C.int
	err := do("MPI_Comm_get_attr", func() C.int { return C.xw_tag_ub(c.c, &ub) })
	return int(ub), err
}

// Datatype is an element type.
type Datatype int

// The element types of ddp's buffers.
const (
	Float32 Datatype = iota + 1
	Float64
	BFloat16
	Int32
	Int64
)

var sizes = map[Datatype]int{Float32: 4, Float64: 8, BFloat16: 2, Int32: 4, Int64: 8}

// Size is the element size in bytes.
func (d Datatype) Size() int { return sizes[d] }

// The handles of MPI's predefined types and operations, read once: in
// Open MPI they are addresses of its globals, and a cgo call per use
// would cost more than the rest of a small all-reduce's overhead.
var (
	datatypeHandles = [...]C.MPI_Datatype{Float32: C.xw_float(), Float64: C.xw_double(), BFloat16: C.xw_uint16(),
		Int32: C.xw_int32(), Int64: C.xw_int64()}
	opHandles = [...]C.MPI_Op{Sum: C.xw_sum(), Min: C.xw_min(), Max: C.xw_max(), Prod: C.xw_prod()}
)

func (d Datatype) mpi() C.MPI_Datatype { return datatypeHandles[d] }

// Op is a reduction.
type Op int

// The reductions (average is a sum the caller divides).
const (
	Sum Op = iota + 1
	Min
	Max
	Prod
)

// mpiOp is op for d: MPI's predefined operation, or for bfloat16 (which
// MPI has no type for) the user-defined one.
func (op Op) mpi(d Datatype) C.MPI_Op {
	if d == BFloat16 {
		return bf16Ops[op-1]
	}
	return opHandles[op]
}

// MaxCount is the most elements one call moves: MPI's counts are C ints.
const MaxCount = 1<<31 - 1

// errBadCount is the error for a buffer whose length is not a whole
// number of elements or too many for MPI's int counts.
var errBadCount = errors.New("mpi: buffer length is not a whole number of elements, or more than 2^31-1 of them")

// count is the element count of b.
func count(b []byte, d Datatype) (C.int, error) {
	n := len(b) / d.Size()
	if n*d.Size() != len(b) || n > MaxCount {
		return 0, errBadCount
	}
	return C.int(n), nil
}

// ptr is b's address, or nil for an empty buffer.
func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}
