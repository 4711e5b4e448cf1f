package ddp

import "time"

// Unexported functions the external tests (package ddp_test) check
// directly.
var VisibleGPUs = visibleGPUs

// SlowBackgroundWrites delays each background checkpoint write by d until
// the test ends.
func SlowBackgroundWrites(t interface{ Cleanup(func()) }, d time.Duration) {
	beforeBackgroundWrite = func() { time.Sleep(d) }
	t.Cleanup(func() { beforeBackgroundWrite = func() {} })
}
