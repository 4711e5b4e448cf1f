package readlimit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func noNUL(b []byte) error {
	if bytes.IndexByte(b, 0) >= 0 {
		return errors.New("holds NUL bytes: not text")
	}
	return nil
}

// TestReadFileIsBounded: a file within the limit reads whole, one over it
// is refused, and a device with no end (/dev/zero, whose size reads 0)
// is refused at the limit, or at its first chunk when reject sees it,
// with the heap grown by about the limit at most.
func TestReadFileIsBounded(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	small := filepath.Join(dir, "small.txt")
	require.NoError(t, os.WriteFile(small, []byte("hello"), 0o644))
	b, err := ReadFile(ctx, small, 5, nil)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(b))
	_, err = ReadFile(ctx, small, 4, nil)
	assert.ErrorIs(t, err, ErrTooLarge)
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	b, err = ReadFile(ctx, empty, 4, nil)
	require.NoError(t, err)
	assert.Empty(t, b)

	start := time.Now()
	_, err = ReadFile(ctx, "/dev/zero", 1<<30, noNUL)
	assert.ErrorContains(t, err, "NUL")
	assert.Less(t, time.Since(start), time.Second, "refused at the first chunk")

	const limit = 64 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = ReadFile(ctx, "/dev/zero", limit, nil)
	runtime.ReadMemStats(&after)
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(limit+2*chunk), "allocated at most the limit and a chunk")
	_, err = ReadFile(ctx, filepath.Join(dir, "missing"), 10, nil)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestReadFileEndsWithItsContext: a FIFO nobody opens for writing, and a
// pipe whose writer never writes nor closes, end within a second of ctx's
// end, leaving no goroutine behind; a FIFO whose writer comes reads whole.
func TestReadFileEndsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	goroutines := runtime.NumGoroutine()

	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("SIGTERM")) })
	start := time.Now()
	_, err := ReadFile(ctx, fifo, 1<<20, nil)
	assert.ErrorContains(t, err, "SIGTERM")
	assert.ErrorContains(t, err, "no process writes to")
	assert.Less(t, time.Since(start), time.Second+200*time.Millisecond)

	// A writer that holds the FIFO open and writes nothing.
	writer := exec.Command("sh", "-c", "exec 3>"+fifo+"; exec sleep 30")
	require.NoError(t, writer.Start())
	defer func() { _ = writer.Process.Kill(); _ = writer.Wait() }()
	ctx, cancel = context.WithCancelCause(t.Context())
	time.AfterFunc(300*time.Millisecond, func() { cancel(errors.New("SIGINT")) })
	start = time.Now()
	_, err = ReadFile(ctx, fifo, 1<<20, nil)
	assert.ErrorContains(t, err, "SIGINT")
	assert.Less(t, time.Since(start), time.Second+300*time.Millisecond)
	_ = writer.Process.Kill()
	_ = writer.Wait()

	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, _ = w.WriteString("through the FIFO")
			_ = w.Close()
		}
	}()
	b, err := ReadFile(t.Context(), fifo, 1<<20, nil)
	require.NoError(t, err)
	assert.Equal(t, "through the FIFO", string(b))
	// Polled here: testify's Eventually runs its condition on goroutines
	// of its own.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "goroutines left behind")
}
