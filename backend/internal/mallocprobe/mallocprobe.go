// Package mallocprobe asks glibc how it serves an allocation, so tests can
// check the allocator settings backend makes at start-up.
package mallocprobe

/*
#include <malloc.h>
#include <stdlib.h>

// Mapped chunks glibc holds outside its heaps while a block of size bytes
// is allocated, minus those before: 1 when the block was mmapped.
static long xladdp_mapped_for(size_t size) {
	long before = (long)mallinfo2().hblks;
	void* p = malloc(size);
	if (p == NULL) return -1;
	long during = (long)mallinfo2().hblks;
	free(p);
	return during - before;
}
*/
import "C"

import "fmt"

// Mmapped reports whether glibc serves a block of size bytes with its own
// mmap (true) or from an arena's heap (false).
func Mmapped(size int) (bool, error) {
	n := C.xladdp_mapped_for(C.size_t(size))
	if n < 0 {
		return false, fmt.Errorf("mallocprobe: malloc(%d) failed", size)
	}
	return n > 0, nil
}
