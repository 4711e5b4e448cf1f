package checkpoint

import (
	"runtime"
	"syscall"
)

// yieldToTraining runs the calling goroutine, for the rest of its life,
// on a thread of the lowest priority (nice 19), so that writing a
// checkpoint in the background takes the CPU the training step leaves
// idle rather than time from the step. The thread is locked and never
// unlocked: it ends with the goroutine, so no other goroutine inherits
// the priority.
func yieldToTraining() {
	runtime.LockOSThread()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19)
}
