package progcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPoll is how often a process waiting for another's compilation
// looks at its lock.
const lockPoll = 20 * time.Millisecond

// Lock takes want's entry lock (an flock on <entry>.lock, which the
// kernel drops if its holder dies), so that of the processes sharing the
// directory (the ranks of a node, or of every node on a shared file
// system) one compiles a program while the others wait, then load it. It
// waits until ctx ends.
func (c *Disk) Lock(ctx context.Context, want Header) (unlock func(), err error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	path := c.Path(want) + ".lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another process's compilation (%s): %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}
