package termination

import (
	"sync"
	"sync/atomic"
)

var holders, holds atomic.Int64

// Hold makes SIGTERM the holder's to act on until release, which may be
// called more than once.
func Hold() (release func()) {
	holders.Add(1)
	holds.Add(1)
	return sync.OnceFunc(func() { holders.Add(-1) })
}

// Held reports whether anyone holds termination.
func Held() bool { return holders.Load() > 0 }

// Holds counts the Holds since the process started.
func Holds() int64 { return holds.Load() }
