package procfs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockHolder starts a process that takes an flock on path and sleeps.
func lockHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("python3", "-c", "import fcntl, sys, time\nf = open(sys.argv[1], 'w')\n"+
		"fcntl.flock(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)", path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)
	return cmd
}

// TestFlockHolderAndState: the process holding an flock on a file is
// found, with its state as it changes (sleeping, stopped, running
// again); a file nobody locks has no holder.
func TestFlockHolderAndState(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 takes the lock in this test: install it")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "entry.lock")
	holder := lockHolder(t, path)
	pid, ok := FlockHolder("/proc", path)
	require.True(t, ok)
	assert.Equal(t, holder.Process.Pid, pid)
	assert.Equal(t, "sleeping", State("/proc", pid))
	require.NoError(t, holder.Process.Signal(syscall.SIGSTOP))
	assert.Eventually(t, func() bool { return State("/proc", pid) == "stopped" }, 5e9, 1e7)
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

// TestCatches: a process with a SIGUSR1 handler is told apart from one
// without (which SIGUSR1 would kill).
func TestCatches(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 runs the processes of this test: install it")
	}
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("python3", "-c", script)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		_, err = bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		return cmd
	}
	catching := start("import signal, time\nsignal.signal(signal.SIGUSR1, lambda *a: None)\nprint('ready', flush=True)\ntime.sleep(60)")
	plain := start("import time\nprint('ready', flush=True)\ntime.sleep(60)")
	assert.True(t, Catches("/proc", catching.Process.Pid, syscall.SIGUSR1))
	assert.False(t, Catches("/proc", plain.Process.Pid, syscall.SIGUSR1))
	assert.False(t, Catches("/proc", 1<<30, syscall.SIGUSR1))
}
