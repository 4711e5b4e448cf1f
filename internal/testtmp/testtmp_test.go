package testtmp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

var outer = os.Getenv("TMPDIR")

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// TestTempFilesLandInTheRunsDirectory: under Run, a temporary file is
// made in a directory of the run's own, not in the machine's.
func TestTempFilesLandInTheRunsDirectory(t *testing.T) {
	f, err := os.CreateTemp("", "probe-")
	assert.NoError(t, err)
	defer f.Close()
	assert.True(t, strings.HasPrefix(filepath.Base(filepath.Dir(f.Name())), "xladdp-tests-"), f.Name())
	assert.NotEqual(t, outer, os.Getenv("TMPDIR"))
}
