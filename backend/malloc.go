package backend

/*
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

// xladdp_malloc_tuned: 1 when the constructor set glibc's allocator up,
// 0 when XLADDP_MALLOC=default, -1 when a mallopt failed.
static int xladdp_malloc_tuned;

// Runs when the binary is loaded, before any thread exists: glibc applies
// the arena limit only to arenas created after it is set.
__attribute__((constructor)) static void xladdp_tune_malloc(void) {
	const char* v = getenv("XLADDP_MALLOC");
	if (v != NULL && strcmp(v, "default") == 0) {
		xladdp_malloc_tuned = 0;
		return;
	}
	int ok = mallopt(M_MMAP_MAX, 0) & mallopt(M_TRIM_THRESHOLD, 1 << 30) &
		mallopt(M_TOP_PAD, 256 << 20) & mallopt(M_ARENA_MAX, 1);
	xladdp_malloc_tuned = ok == 1 ? 1 : -1;
}

static int xladdp_malloc_state(void) { return xladdp_malloc_tuned; }
*/
import "C"

// EnvMalloc: XLADDP_MALLOC=default leaves glibc's allocator settings alone.
const EnvMalloc = "XLADDP_MALLOC"

// A program that links this package sets glibc's allocator up for XLA's
// step-sized buffers when it starts. By default glibc mmaps every buffer
// over a (dynamic) threshold, gives freed memory back to the kernel, and
// keeps an arena per thread, while XLA's CPU runtime allocates a step's
// activations on one thread and frees them on another: every step then
// faults in fresh zeroed pages (39% of the MNIST CNN step's CPU time was in
// the kernel's page-fault path). One arena that serves every buffer from its
// heap (no mmap, whatever the size: XLA's per-execution temporary slab is
// ~95 MiB for the 2-replica CNN, above the largest mmap threshold glibc
// accepts) and keeps up to 1 GiB of freed memory at its top makes the
// 1-device step about 1.5x and the 2-replica step 1.4x faster
// (docs/BENCHMARKS.md). The cost is a caching allocator's: the process keeps
// freed memory mapped for reuse. XLADDP_MALLOC=default (in the environment
// the program starts with) turns it off.

// MallocTuned reports whether the allocator settings above are in effect.
func MallocTuned() bool { return C.xladdp_malloc_state() == 1 }
