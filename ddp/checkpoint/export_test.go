package checkpoint

import "time"

// SlowBackgroundWrites delays each background checkpoint write by d until
// the test ends.
func SlowBackgroundWrites(t interface{ Cleanup(func()) }, d time.Duration) {
	beforeBackgroundWrite = func() { time.Sleep(d) }
	t.Cleanup(func() { beforeBackgroundWrite = func() {} })
}
