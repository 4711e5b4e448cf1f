package backend

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend/internal/mallocprobe"
)

// TestMallocSetUpAtStart: the allocator settings are in effect when the
// program starts, so buffers of every size come from the heap, and
// XLADDP_MALLOC=default (set before it starts) leaves glibc's defaults, which
// mmap large blocks.
func TestMallocSetUpAtStart(t *testing.T) {
	sizes := []int{1 << 10, 1 << 20, 100 << 20, 1 << 30}
	if os.Getenv("XLADDP_MALLOC_CHILD") == "1" {
		if MallocTuned() {
			os.Exit(3)
		}
		big, err := mallocprobe.Mmapped(100 << 20)
		if err != nil || !big {
			os.Exit(4)
		}
		os.Exit(0)
	}
	if os.Getenv(EnvMalloc) != "default" {
		assert.True(t, MallocTuned())
		for _, size := range sizes {
			mapped, err := mallocprobe.Mmapped(size)
			require.NoError(t, err)
			assert.False(t, mapped, "a %d-byte block was mmapped, not served from the heap", size)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMallocSetUpAtStart$")
	cmd.Env = append(os.Environ(), "XLADDP_MALLOC_CHILD=1", EnvMalloc+"=default")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "with XLADDP_MALLOC=default the child still tuned malloc (exit 3) or served 100 MiB from the heap (exit 4): %s", out)
}
