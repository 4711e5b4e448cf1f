package workerenv

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRegroupAssignment: the agent's assignment reaches the worker that
// waits for it, whole, and is removed once read; a worker waits for the
// file to appear.
func TestRegroupAssignment(t *testing.T) {
	dir := t.TempDir()
	env := []string{Rank + "=1", WorldSize + "=2", MasterAddr + "=127.0.0.1", MasterPort + "=29511", RestartCount + "=3",
		FlightDir + "=/tmp/x", Threads + "=1"}
	go func() {
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, WriteRegroup(dir, 0, 2, env))
	}()
	got, err := AwaitRegroup(context.Background(), dir, 0, 2, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, env, got)
	assert.NoFileExists(t, RegroupFile(dir, 0, 2), "read once")
	require.NoError(t, WriteRegroup(dir, 1, 2, env))
	_, err = AwaitRegroup(context.Background(), dir, 0, 3, 200*time.Millisecond)
	assert.ErrorContains(t, err, "no assignment from ddprun in 200ms", "another local rank's and round's are not this one's")
}

// TestRegroupAssignmentHostile: what is not an assignment of placement
// variables is refused, naming the file, without blocking or reading
// past the bound: other variables (LD_PRELOAD), lines without "=", an
// empty file, one over 64 KiB, a FIFO, a symlink to /dev/zero, a
// directory; a wait ends with its context, and the agent refuses to
// write what a worker would refuse.
func TestRegroupAssignmentHostile(t *testing.T) {
	dir := t.TempDir()
	write := func(lr int, data string) {
		require.NoError(t, os.WriteFile(RegroupFile(dir, lr, 0), []byte(data), 0o600))
	}
	write(0, Rank+"=1\nLD_PRELOAD=/tmp/evil.so\n")
	write(1, "RANK\n")
	write(2, "")
	write(3, strings.Repeat(Rank+"=1\n", 20000))
	require.NoError(t, syscall.Mkfifo(RegroupFile(dir, 4, 0), 0o600))
	require.NoError(t, os.Symlink("/dev/zero", RegroupFile(dir, 5, 0)))
	require.NoError(t, os.Mkdir(RegroupFile(dir, 6, 0), 0o700))
	for lr, want := range []string{`"LD_PRELOAD=/tmp/evil.so" is not a worker placement variable`, `"RANK" is not a worker placement variable`,
		"is empty", "over the size limit of 64 KiB", "FIFO", "device", "directory"} {
		start := time.Now()
		_, err := AwaitRegroup(context.Background(), dir, lr, 0, time.Minute)
		require.Error(t, err, "local rank %d", lr)
		assert.Contains(t, err.Error(), want, "local rank %d", lr)
		assert.Less(t, time.Since(start), 30*time.Second, "local rank %d: refused, not waited for", lr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := AwaitRegroup(ctx, dir, 9, 0, time.Hour)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, WriteRegroup(dir, 9, 0, []string{"PATH=/tmp"}), "not a worker placement variable")
	assert.NoFileExists(t, RegroupFile(dir, 9, 0))
}
