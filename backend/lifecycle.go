package backend

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gomlx/go-xla/pjrt"
)

// ErrClosed: the backend was closed; open a new one.
var ErrClosed = errors.New("backend closed")

// Acquire marks one use of the client in flight (an upload, a compile, an
// execution, a download) and returns the function that ends it. Close waits
// for every use in flight and makes every later Acquire fail with
// ErrClosed, so a use and a Close in different goroutines are an error or
// a wait, never a use of a destroyed client.
//
// Acquire does not nest with a Close in between: a caller holds one use at
// a time per operation.
func (b *Backend) Acquire(op string) (release func(), err error) {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%s on %s: %w (it was closed; open a new backend)", op, b.target, ErrClosed)
	}
	b.inFlight++
	released := false
	return func() {
		b.life.Lock()
		defer b.life.Unlock()
		if released {
			return
		}
		released = true
		b.inFlight--
		if b.inFlight == 0 {
			b.idle.Broadcast()
		}
	}, nil
}

// Close refuses new work, waits for the work in flight (executions started
// with Execute included), runs the OnClose
// hooks, and destroys the client. The plugin stays loaded: PJRT plugins
// cannot be safely unloaded, and a later Open reuses it. Closing twice is
// a no-op.
func (b *Backend) Close() error {
	b.life.Lock()
	if b.closed {
		b.life.Unlock()
		return nil
	}
	b.closed = true
	for {
		if len(b.running) > 0 {
			// Executions end by themselves; wait for them outside the lock
			// (their Wait takes it).
			running := make([]*Execution, 0, len(b.running))
			for x := range b.running {
				running = append(running, x)
			}
			b.life.Unlock()
			for _, x := range running {
				_ = x.Wait() // its error belongs to whoever waits for the step
			}
			b.life.Lock()
			continue
		}
		if b.inFlight == 0 {
			break
		}
		b.idle.Wait()
	}
	hooks := b.onClose
	b.onClose = nil
	b.life.Unlock()
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
	if b.gomlx != nil {
		settleBufferCleanups()
		b.gomlx.Finalize()
	}
	return nil
}

// settleBufferCleanups collects garbage and waits (at most 200 ms) for
// the buffer cleanups it queued to run: go-xla destroys a
// collected buffer from a cleanup goroutine, unsynchronized with the
// client's destruction, so one still running while the client goes is a
// data race and a buffer destroyed after its client.
func settleBufferCleanups() {
	runtime.GC()
	last := pjrt.BuffersAlive()
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		now := pjrt.BuffersAlive()
		if now == last {
			return
		}
		last = now
	}
}

// OnClose registers f to run during Close, after the work in flight has
// drained and before the client is destroyed: the place to free what was
// made with the client (compiled programs). Hooks run in reverse order of
// registration; after Close, f runs at once.
func (b *Backend) OnClose(f func()) {
	b.life.Lock()
	if !b.closed {
		b.onClose = append(b.onClose, f)
		b.life.Unlock()
		return
	}
	b.life.Unlock()
	f()
}

// Closed reports whether Close was called.
func (b *Backend) Closed() bool {
	b.life.Lock()
	defer b.life.Unlock()
	return b.closed
}
