package backend

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMallocSetUpAtStart: the allocator settings are in effect when the
// program starts, and XLADDP_MALLOC=default (set before it starts) leaves
// glibc's defaults.
func TestMallocSetUpAtStart(t *testing.T) {
	if os.Getenv("XLADDP_MALLOC_CHILD") == "1" {
		if MallocTuned() {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Getenv(EnvMalloc) != "default" {
		assert.True(t, MallocTuned())
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMallocSetUpAtStart$")
	cmd.Env = append(os.Environ(), "XLADDP_MALLOC_CHILD=1", EnvMalloc+"=default")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "with XLADDP_MALLOC=default the child still tuned malloc: %s", out)
}
