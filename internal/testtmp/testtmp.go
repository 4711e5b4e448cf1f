package testtmp

import (
	"fmt"
	"os"
	"testing"
)

// Run runs m's tests with $TMPDIR set to a fresh directory, which it
// removes after them, and returns their exit code.
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "xladdp-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtmp:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Setenv("TMPDIR", dir); err != nil {
		fmt.Fprintln(os.Stderr, "testtmp:", err)
		return 1
	}
	return m.Run()
}
