package progcache

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/internal/procfs"
	"github.com/xladdp/xladdp/internal/procfs/procfstest"
)

func holdLock(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	return procfstest.HoldFlock(t, path, func() bool { _, ok := procfs.FlockHolder("/proc", path); return ok })
}

// words collects what Lock says.
type words struct {
	mu    sync.Mutex
	lines []string
}

func (w *words) say(s string) { w.mu.Lock(); w.lines = append(w.lines, s); w.mu.Unlock() }
func (w *words) all() string  { w.mu.Lock(); defer w.mu.Unlock(); return strings.Join(w.lines, "\n") }

// TestLockWaitIsNeverSilentNorEndless: a waiter names the holder (pid,
// command, state) after waitNotice and again after each; a stopped holder
// is passed by at its first word, a running one at waitLimit, each time
// saying so; a holder that lets go gives the lock; ctx ends the wait.
func TestLockWaitIsNeverSilentNorEndless(t *testing.T) {
	assert.LessOrEqual(t, waitNotice, 10*time.Second, "a waiter speaks within 10 s")
	defer func(n, l time.Duration) { waitNotice, waitLimit = n, l }(waitNotice, waitLimit)
	waitNotice, waitLimit = 200*time.Millisecond, 900*time.Millisecond
	d := &Disk{Dir: t.TempDir(), Identity: "plugin", Lowering: "code"}

	t.Run("stopped holder", func(t *testing.T) {
		h := d.Header("stopped", []int{0}, nil, nil)
		holder := holdLock(t, d.Path(h)+".lock")
		require.NoError(t, holder.Process.Signal(syscall.SIGSTOP))
		var w words
		start := time.Now()
		unlock, err := d.Lock(t.Context(), h, w.say)
		require.NoError(t, err)
		unlock()
		assert.Less(t, time.Since(start), waitLimit, "passed by at the first word")
		assert.Contains(t, w.all(), fmt.Sprintf("for process %d (", holder.Process.Pid))
		assert.Contains(t, w.all(), "flock -o "+d.Path(h)+".lock sleep 60", "the command line")
		assert.Contains(t, w.all(), "; stopped) to compile a program")
		assert.Contains(t, w.all(), "compiling it without the lock")
	})
	t.Run("running holder", func(t *testing.T) {
		h := d.Header("running", []int{0}, nil, nil)
		holder := holdLock(t, d.Path(h)+".lock")
		var w words
		start := time.Now()
		unlock, err := d.Lock(t.Context(), h, w.say)
		require.NoError(t, err)
		unlock()
		assert.GreaterOrEqual(t, time.Since(start), waitLimit)
		assert.Contains(t, w.all(), fmt.Sprintf("waiting 0s for process %d (", holder.Process.Pid))
		assert.Contains(t, w.all(), "; sleeping) to compile a program")
		assert.Contains(t, w.all(), "compiling it without the lock")
		assert.GreaterOrEqual(t, strings.Count(w.all(), "\n"), 2, "a word every waitNotice")
	})
	t.Run("working holder", func(t *testing.T) {
		defer func(n, l, b time.Duration) { waitNotice, waitLimit, busyNotice = n, l, b }(waitNotice, waitLimit, busyNotice)
		// Notices half a second apart: a spinning holder gets ticks in
		// each even on a loaded machine.
		waitNotice, waitLimit, busyNotice = 500*time.Millisecond, 2*time.Second, time.Hour
		h := d.Header("working", []int{0}, nil, nil)
		path := d.Path(h) + ".lock"
		// The holder itself spins, as a compiling rank does.
		holder := exec.Command("python3", "-c", "import fcntl,sys\nf=open(sys.argv[1],'a')\nfcntl.flock(f,fcntl.LOCK_EX)\nwhile True: pass", path)
		require.NoError(t, holder.Start())
		t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
		require.Eventually(t, func() bool { _, ok := procfs.FlockHolder("/proc", path); return ok }, 10*time.Second, 10*time.Millisecond)
		var w words
		unlock, err := d.Lock(t.Context(), h, w.say)
		require.NoError(t, err)
		unlock()
		assert.NotContains(t, w.all(), "waiting ", "a working holder is not named every waitNotice")
		assert.Contains(t, w.all(), "compiling it without the lock", "but passed at waitLimit, saying so")
	})
	t.Run("holder lets go", func(t *testing.T) {
		h := d.Header("released", []int{0}, nil, nil)
		holder := holdLock(t, d.Path(h)+".lock")
		time.AfterFunc(300*time.Millisecond, func() { _ = holder.Process.Kill() })
		var w words
		unlock, err := d.Lock(t.Context(), h, w.say)
		require.NoError(t, err)
		defer unlock()
		assert.NotContains(t, w.all(), "compiling it without the lock", "the lock was taken")
	})
	t.Run("cancelled", func(t *testing.T) {
		h := d.Header("cancelled", []int{0}, nil, nil)
		holdLock(t, d.Path(h)+".lock")
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(100*time.Millisecond, func() { cancel(errors.New("closing")) })
		var w words
		_, err := d.Lock(ctx, h, w.say)
		assert.ErrorContains(t, err, "closing")
	})
}
