package termination

import (
	"sync"
	"sync/atomic"
)

var holders atomic.Int64

// Hold makes SIGTERM the holder's to act on until release, which may be
// called more than once.
func Hold() (release func()) {
	holders.Add(1)
	return sync.OnceFunc(func() { holders.Add(-1) })
}

// Held reports whether anyone holds termination.
func Held() bool { return holders.Load() > 0 }
