package termination

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ErrInterrupted and ErrTerminated are the causes of a Context's
// cancellation by SIGINT and by SIGTERM.
var (
	ErrInterrupted = errors.New("interrupt signal received")
	ErrTerminated  = errors.New("terminated signal received")
)

// Context returns a copy of parent that SIGTERM cancels unless
// termination is held when it arrives: a holder (a checkpointer) then
// acts on it and the program ends by itself, its context intact for the
// save. SIGINT (Ctrl-C) is the same notice the first time while held,
// said on stderr; a second SIGINT, or one while nothing is held, cancels
// at once. stop releases the signals and returns once the goroutine
// watching them has ended; call it when the program is done.
func Context(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		interrupted := false
		for {
			select {
			case sig := <-signals:
				switch {
				case sig == syscall.SIGTERM && !Held():
					cancel(ErrTerminated)
				case sig == syscall.SIGTERM:
				case Held() && !interrupted:
					interrupted = true
					fmt.Fprintln(os.Stderr, "interrupt: committing this step's checkpoint, then stopping (the same command resumes); "+
						"interrupt again to stop at once, losing the steps since the last checkpoint")
				default:
					cancel(ErrInterrupted)
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, sync.OnceFunc(func() {
		signal.Stop(signals)
		close(done)
		watching.Wait()
		cancel(context.Canceled)
	})
}
