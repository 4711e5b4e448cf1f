// Package procfstest holds a file's flock from another process, as a
// rank of another job or another compiler would, for the tests of what
// reads the holder from /proc. It knows nothing of what the lock guards.
package procfstest

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// HoldFlock starts util-linux's flock holding an flock on path (-o: the
// lock stays with flock itself, not the sleep it runs) and waits until
// held reports it taken; the holder is killed when the test ends.
func HoldFlock(t testing.TB, path string, held func() bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("flock", "-o", path, "sleep", "60")
	require.NoError(t, cmd.Start(), "util-linux's flock (Debian essential)")
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, held, 10*time.Second, 10*time.Millisecond, "the flock on %s taken", path)
	return cmd
}
