package procfs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/internal/procfs/procfstest"
)

func lockHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	return procfstest.HoldFlock(t, path, func() bool { _, ok := FlockHolder("/proc", path); return ok })
}

// TestFlockHolderAndState: the process holding an flock on a file is
// found, with its state as it changes (sleeping, stopped, running
// again); a file nobody locks has no holder.
func TestFlockHolderAndState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "entry.lock")
	holder := lockHolder(t, path)
	pid, ok := FlockHolder("/proc", path)
	require.True(t, ok)
	assert.Equal(t, holder.Process.Pid, pid)
	// Waiting for its sleep child; on a loaded machine it may still be
	// running when the lock is seen taken.
	assert.Eventually(t, func() bool { return State("/proc", pid) == "sleeping" }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, holder.Process.Signal(syscall.SIGSTOP))
	assert.Eventually(t, func() bool { return State("/proc", pid) == "stopped" }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, holder.Process.Signal(syscall.SIGCONT))

	free := filepath.Join(dir, "free.lock")
	require.NoError(t, os.WriteFile(free, nil, 0o644))
	_, ok = FlockHolder("/proc", free)
	assert.False(t, ok)
	_, ok = FlockHolder("/proc", filepath.Join(dir, "missing"))
	assert.False(t, ok)
	_, ok = FlockHolder(t.TempDir(), path)
	assert.False(t, ok, "no locks table")
	assert.Empty(t, State("/proc", 1<<30))
}

// TestCatches: a process with a SIGUSR1 handler (a shell's trap) is
// told apart from one without (which SIGUSR1 would kill).
func TestCatches(t *testing.T) {
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		_, err = bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		return cmd
	}
	catching := start("trap 'echo usr1' USR1; echo ready; while :; do sleep 1; done")
	plain := start("echo ready; exec sleep 60")
	assert.True(t, Catches("/proc", catching.Process.Pid, syscall.SIGUSR1))
	assert.False(t, Catches("/proc", plain.Process.Pid, syscall.SIGUSR1))
	assert.False(t, Catches("/proc", 1<<30, syscall.SIGUSR1))
}

// TestCommandLineIsOneLine: arguments holding newlines and escapes (a
// shell script given with -c) come back as one line of plain text, so a
// command line cannot forge lines in the messages that quote it.
func TestCommandLineIsOneLine(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo ready\n: '\x1b[2J'\nwhile :; do sleep 1; done")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_, err = bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "sh -c echo ready : ' [2J' while :; do sleep 1; done", CommandLine("/proc", cmd.Process.Pid))
}

// TestStartTime: a process's start time is read from its stat, even with
// a command name holding spaces and parentheses; it tells a process from
// a later one with the same pid; an unknown pid has none.
func TestStartTime(t *testing.T) {
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "7"), 0o755))
	stat := "7 (a (b) c) S 1 7 7 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 123456 1000 20 18446744073709551615"
	require.NoError(t, os.WriteFile(filepath.Join(proc, "7", "stat"), []byte(stat), 0o644))
	ticks, ok := StartTime(proc, 7)
	require.True(t, ok)
	assert.Equal(t, uint64(123456), ticks)
	cpu, ok := CPUTicks(proc, 7)
	require.True(t, ok)
	assert.Equal(t, uint64(5+6), cpu, "utime + stime")

	self, ok := StartTime("/proc", os.Getpid())
	require.True(t, ok)
	child := exec.Command("sleep", "5")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	later, ok := StartTime("/proc", child.Process.Pid)
	require.True(t, ok)
	assert.GreaterOrEqual(t, later, self)

	_, ok = StartTime("/proc", 1<<30)
	assert.False(t, ok)
	require.NoError(t, os.WriteFile(filepath.Join(proc, "7", "stat"), []byte("7 (x) S 1"), 0o644))
	_, ok = StartTime(proc, 7)
	assert.False(t, ok, "a short stat")
}
