package ddp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/store"
)

// DefaultTimeout bounds each collective unless Options.Timeout says
// otherwise (torch's default is 30 minutes; a hung job should fail sooner).
const DefaultTimeout = 10 * time.Minute

// ProcessGroup is a set of processes that run collectives together, like a
// torch.distributed process group. Operations run in the order they are
// issued, on one executor goroutine; the Async variants return at once.
type ProcessGroup struct {
	rank, size                int
	localRank, localWorldSize int
	timeout                   time.Duration
	debug                     bool
	store                     store.Store
	storeServer               *store.Server
	peers                     []*peer // indexed by rank; nil for self
	// shm is set when all ranks share this host (shm.go).
	shm *shmState

	ops    chan *Work
	mu     sync.Mutex
	broken error // first failure; every later operation returns it
	closed bool
	seq    uint64 // collectives issued, for tags and messages
	wg     sync.WaitGroup
}

// Rank returns this process's rank.
func (g *ProcessGroup) Rank() int { return g.rank }

// WorldSize returns the number of processes.
func (g *ProcessGroup) WorldSize() int { return g.size }

// LocalRank returns the rank among the processes on this host.
func (g *ProcessGroup) LocalRank() int { return g.localRank }

// LocalWorldSize returns the number of processes on this host.
func (g *ProcessGroup) LocalWorldSize() int { return g.localWorldSize }

// Store returns the store the group rendezvoused through.
func (g *ProcessGroup) Store() store.Store { return g.store }

// Work is an operation issued asynchronously.
type Work struct {
	name string
	// run executes on the executor; a non-nil tail finishes the operation
	// off the executor (a send waiting for its bytes to leave).
	run  func(deadline time.Time) (tail func() error, err error)
	done chan struct{}
	err  error
}

// Wait blocks until the operation finishes or ctx ends.
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return fmt.Errorf("ddp: waiting for %s: %w", w.name, ctx.Err())
	}
}

func finished(name string, err error) *Work {
	w := &Work{name: name, done: make(chan struct{}), err: err}
	close(w.done)
	return w
}

// submit queues an operation for the executor. name is completed with the
// operation's sequence number.
func (g *ProcessGroup) submit(name string, run func(seq uint64, deadline time.Time) error) *Work {
	return g.submitWithTail(name, func(seq uint64, deadline time.Time) (func() error, error) {
		return nil, run(seq, deadline)
	})
}

// submitWithTail is submit for operations that finish off the executor.
func (g *ProcessGroup) submitWithTail(name string, run func(seq uint64, deadline time.Time) (func() error, error)) *Work {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return finished(name, ErrGroupClosed)
	}
	if g.broken != nil {
		err := g.broken
		g.mu.Unlock()
		return finished(name, err)
	}
	g.seq++
	seq := g.seq
	g.mu.Unlock()
	w := &Work{name: fmt.Sprintf("%s #%d", name, seq), done: make(chan struct{})}
	w.run = func(deadline time.Time) (func() error, error) { return run(seq, deadline) }
	g.ops <- w
	return w
}

func (g *ProcessGroup) executor() {
	defer g.wg.Done()
	for w := range g.ops {
		g.mu.Lock()
		broken := g.broken
		g.mu.Unlock()
		if broken != nil {
			w.err = broken
			close(w.done)
			continue
		}
		tail, err := w.run(time.Now().Add(g.timeout))
		if err != nil || tail == nil {
			w.err = g.attribute(w.name, err)
			if w.err != nil {
				g.fail(w.err)
			}
			close(w.done)
			continue
		}
		go func() {
			w.err = g.attribute(w.name, tail())
			if w.err != nil {
				g.fail(w.err)
			}
			close(w.done)
		}()
	}
}

// attribute makes an operation's error name the operation.
func (g *ProcessGroup) attribute(op string, err error) error {
	var pe *PeerError
	if err == nil {
		return nil
	}
	if errors.As(err, &pe) && pe.Op == "" {
		pe.Op = op
		return pe
	}
	if errors.As(err, &pe) || errors.Is(err, ErrMismatch) {
		return err
	}
	return fmt.Errorf("ddp: %s on rank %d: %w", op, g.rank, err)
}

// peerError wraps an I/O failure with the peer it came from; a failure
// another rank reported keeps that rank's account of the cause.
func peerError(rank int, err error) error {
	var ab *abortError
	if errors.As(err, &ab) {
		if ab.culprit >= 0 {
			return &PeerError{Rank: ab.culprit, Err: fmt.Errorf("failed, as rank %d reports (%s)", ab.from, ab.msg)}
		}
		return &PeerError{Rank: ab.from, Err: fmt.Errorf("aborted: %s", ab.msg)}
	}
	return &PeerError{Rank: rank, Err: err}
}

// fail breaks the group: every peer is told why (so ranks blocked on
// someone else learn the cause) and every later operation returns err.
func (g *ProcessGroup) fail(err error) {
	g.mu.Lock()
	if g.broken != nil {
		g.mu.Unlock()
		return
	}
	g.broken = err
	g.mu.Unlock()
	culprit := -1
	var pe *PeerError
	if errors.As(err, &pe) {
		culprit = pe.Rank
	}
	var wg sync.WaitGroup
	for _, p := range g.peers {
		if p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.abort(err.Error(), culprit)
			}()
		}
	}
	wg.Wait()
}

// Destroy ends the group: queued operations finish, connections close, and
// rank 0 stops the store it hosted.
func (g *ProcessGroup) Destroy() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	close(g.ops)
	g.wg.Wait()
	for _, p := range g.peers {
		if p != nil {
			p.shutdown()
		}
	}
	g.shm.close()
	var errs []error
	if g.store != nil {
		errs = append(errs, g.store.Close())
	}
	if g.storeServer != nil {
		errs = append(errs, g.storeServer.Close())
	}
	return errors.Join(errs...)
}
