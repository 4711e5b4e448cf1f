package checkpoint

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// threadNice reads thread tid's nice value (field 19 of its stat line).
func threadNice(t *testing.T, tid int) (int, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var nice int
	_, err = fmt.Sscan(fields[16], &nice)
	require.NoError(t, err)
	return nice, true
}

// TestBackgroundWriterYieldsAndLeavesNoThreadBehind: the checkpoint
// writer's thread runs at nice 19, the caller's thread keeps its
// priority, and once the writer's goroutine ends its thread is gone (or,
// when it was the process's main thread, which Go never ends, idle for
// good): no goroutine runs at the lowered priority afterwards.
func TestBackgroundWriterYieldsAndLeavesNoThreadBehind(t *testing.T) {
	for round := range 5 {
		tids := make(chan int)
		done := make(chan struct{})
		go func() {
			yieldToTraining()
			tids <- syscall.Gettid()
			<-done
		}()
		tid := <-tids
		nice, ok := threadNice(t, tid)
		require.True(t, ok)
		assert.Equal(t, 19, nice, "round %d: the writer's thread", round)
		close(done)
		if tid != os.Getpid() {
			assert.Eventually(t, func() bool {
				_, alive := threadNice(t, tid)
				return !alive
			}, 5*time.Second, 10*time.Millisecond, "round %d: the lowered thread exits with its goroutine", round)
		}
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if nice, ok := threadNice(t, syscall.Gettid()); ok {
					assert.Zero(t, nice, "round %d: a later goroutine runs at nice %d", round, nice)
				}
				time.Sleep(time.Millisecond)
			}()
		}
		wg.Wait()
	}
}
