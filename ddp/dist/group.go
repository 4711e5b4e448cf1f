package dist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/transport"
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
	store                     store.Store
	// transport is the transport's registered name; t carries the
	// operations, as its features say.
	transport string
	t         transport.Transport
	inliner   transport.Inliner // t's fast path, if it has one
	features  transport.Features

	ops chan *Work
	// submitMu orders submissions against Destroy closing ops: submitters
	// hold it shared while they queue, Destroy exclusively while it closes.
	submitMu sync.RWMutex
	mu       sync.Mutex
	broken   error // first failure; every later operation returns it
	closed   bool
	// seq counts collectives, which every rank issues in the same order;
	// it numbers their frames. Point-to-point operations involve only
	// some ranks, so they are counted apart (p2pSeq) and never shift it.
	seq    uint64
	p2pSeq uint64
	// inFlight counts operations queued or running; runMu is held while
	// one runs, on the executor or inline (runInline).
	inFlight int
	runMu    sync.Mutex
	wg       sync.WaitGroup
	// tails counts operations finishing off the executor.
	tails sync.WaitGroup
	// flight records the last operations issued, for a dump into
	// flightDir (if set) when the job hangs or fails.
	flight    *flight.Recorder
	flightDir string
	// busy is the work this rank declared outside the collectives (Busy).
	busy flight.BusyState
	// signals delivers SIGUSR1 to the dumping goroutine, which ends when
	// signalsDone closes (Destroy).
	signals     chan os.Signal
	signalsDone chan struct{}
	signalsWG   sync.WaitGroup
}

// SharedMemoryAllReduces reports how many all-reduces went through the
// same-host shared-memory path rather than TCP; zero when the ranks are
// not all on one host, XLADDP_SHM_MIB=0, or the transport has none.
func (g *ProcessGroup) SharedMemoryAllReduces() int64 {
	if sm, ok := g.t.(transport.SharedMemory); ok {
		return sm.SharedMemoryAllReduces()
	}
	return 0
}

// Collectives reports how many collectives (all-reduces, broadcasts,
// barriers, ...) this rank has issued: every rank's count is the same at
// the same point of the program, and a gradient all-reduce of n buckets
// adds n.
func (g *ProcessGroup) Collectives() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}

// HasSharedMemory reports whether the group set up a same-host
// shared-memory segment.
func (g *ProcessGroup) HasSharedMemory() bool {
	sm, ok := g.t.(transport.SharedMemory)
	return ok && sm.HasSharedMemory()
}

// SharedBuffer returns a zeroed buffer of n elements in this rank's shared
// memory, when the group has a shared-memory segment (all ranks on one
// host). All-reduces of such buffers run in place at memory speed, so it
// suits buffers reduced every step, like DDP's gradient buckets. Every
// rank must allocate the same buffers in the same order. The buffer lives
// until Destroy. Without shared memory it is an ordinary buffer.
func (g *ProcessGroup) SharedBuffer(dtype DType, n int) (Buffer, error) {
	if sm, ok := g.t.(transport.SharedMemory); ok {
		return sm.SharedBuffer(dtype, n)
	}
	if err := (Buffer{DType: dtype}).Check("SharedBuffer"); err != nil {
		return Buffer{}, err
	}
	return ByteBuffer(dtype, make([]byte, n*dtype.Size())), nil
}

// Rank returns this process's rank.
func (g *ProcessGroup) Rank() int { return g.rank }

// WorldSize returns the number of processes.
func (g *ProcessGroup) WorldSize() int { return g.size }

// LocalRank returns the rank among the processes on this host.
func (g *ProcessGroup) LocalRank() int { return g.localRank }

// LocalWorldSize returns the number of processes on this host.
func (g *ProcessGroup) LocalWorldSize() int { return g.localWorldSize }

// Transport returns the group's transport: TransportTCP or TransportMPI
// (torch calls it the backend, as --backend does).
func (g *ProcessGroup) Transport() string { return g.transport }

// Timeout is how long each operation may take (Options.Timeout).
func (g *ProcessGroup) Timeout() time.Duration { return g.timeout }

// Fail breaks the group with err, as a failed operation does: every peer
// is told why (so ranks waiting on this one fail promptly), and every
// later operation returns err. Code that runs between collectives and
// fails (a device copy) calls it so the other ranks do not wait out their
// timeout.
func (g *ProcessGroup) Fail(err error) { g.fail(err) }

// Store returns the store the group rendezvoused through (nil under the
// mpi backend, whose launcher did the rendezvous).
func (g *ProcessGroup) Store() store.Store { return g.store }

// Work is an operation issued asynchronously.
type Work struct {
	name  string
	group *ProcessGroup
	// run executes on the executor; a non-nil tail finishes the operation
	// off the executor (a send waiting for its bytes to leave).
	run  func(deadline time.Time) (tail func() error, err error)
	done chan struct{}
	err  error
	// flightID is the operation's entry in the group's flight recorder.
	flightID flight.ID
}

// Wait blocks until the operation finishes. If ctx ends first, the
// operation cannot simply be left running: it reads and writes the
// caller's buffer. So Wait breaks the group (every rank learns why), waits
// for the operation to stop touching the buffer, which the broken group
// makes prompt, and returns an error saying so.
func (w *Work) Wait(ctx context.Context) error {
	select { // a finished operation wins over an ended ctx
	case <-w.done:
		return w.err
	default:
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	err := fmt.Errorf("ddp: rank %d stopped waiting for %s: %w; the process group is broken, since the operation "+
		"could not finish without this rank (destroy it and start a new one)", w.group.rank, w.name, context.Cause(ctx))
	w.group.fail(err)
	<-w.done
	return err
}

func finished(name string, err error) *Work {
	w := &Work{name: name, done: make(chan struct{}), err: err}
	close(w.done)
	return w
}

// enqueue queues operation c; a non-nil tail from run finishes it off the
// executor. Collectives take the next collective sequence number;
// point-to-point operations take their own, so a Send between two ranks
// never shifts the numbering of the collectives all ranks share.
func (g *ProcessGroup) enqueue(c transport.Call, collective bool, run func(seq uint64, deadline time.Time) (func() error, error)) *Work {
	name := c.Kind.String()
	g.submitMu.RLock()
	defer g.submitMu.RUnlock()
	g.mu.Lock()
	seq, label, err := g.claim(name, collective)
	if err != nil {
		g.mu.Unlock()
		return finished(name, err)
	}
	g.inFlight++
	g.mu.Unlock()
	w := &Work{name: label, group: g, done: make(chan struct{}), flightID: g.flight.Issue(flightOp(c, seq, !collective), 2)}
	w.run = func(deadline time.Time) (func() error, error) { return run(seq, deadline) }
	g.ops <- w
	return w
}

// claim numbers an operation as it is issued (g.mu held): collectives in
// the order every rank shares, point-to-point operations apart, so a Send
// between two ranks never shifts the collectives' numbers. It fails when
// the group takes no more operations.
func (g *ProcessGroup) claim(name string, collective bool) (seq uint64, label string, err error) {
	if err := g.refusal(); err != nil {
		return 0, name, err
	}
	if collective {
		g.seq++
		return g.seq, fmt.Sprintf("%s #%d", name, g.seq), nil
	}
	g.p2pSeq++
	return g.p2pSeq, fmt.Sprintf("%s (point-to-point #%d)", name, g.p2pSeq), nil
}

// refusal is why the group takes no more operations (nil while it does):
// ErrGroupClosed after Destroy, else its first failure. g.mu held.
func (g *ProcessGroup) refusal() error {
	if g.closed {
		return ErrGroupClosed
	}
	return g.broken
}

// beginInline claims the next collective for the caller's goroutine when
// nothing is queued or running (ok false otherwise); endInline must
// follow with its outcome.
func (g *ProcessGroup) beginInline() (seq uint64, ok bool) {
	g.submitMu.RLock()
	g.mu.Lock()
	if g.closed || g.broken != nil || g.inFlight > 0 {
		g.mu.Unlock()
		g.submitMu.RUnlock()
		return 0, false
	}
	g.seq++
	seq = g.seq
	g.inFlight++
	g.tails.Add(1) // Destroy waits for it
	g.mu.Unlock()
	g.submitMu.RUnlock()
	g.runMu.Lock()
	return seq, true
}

// endInline ends collective seq, which beginInline claimed; a failure is
// attributed to it and breaks the group.
func (g *ProcessGroup) endInline(name string, seq uint64, err error) error {
	g.runMu.Unlock()
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	g.tails.Done()
	if err != nil {
		err = g.attribute(fmt.Sprintf("%s #%d", name, seq), err)
		g.fail(err)
	}
	return err
}

func (g *ProcessGroup) executor() {
	defer g.wg.Done()
	for w := range g.ops {
		g.mu.Lock()
		broken := g.broken
		g.mu.Unlock()
		if broken != nil {
			g.mu.Lock()
			g.inFlight--
			g.mu.Unlock()
			w.err = broken
			g.flight.End(w.flightID, broken)
			close(w.done)
			continue
		}
		g.flight.Start(w.flightID)
		g.runMu.Lock()
		tail, err := w.run(time.Now().Add(g.timeout))
		g.runMu.Unlock()
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
		if err != nil || tail == nil {
			g.complete(w, err)
			continue
		}
		g.finishOffExecutor(w, tail)
	}
}

// complete ends w with err, named after w; a failure breaks the group.
func (g *ProcessGroup) complete(w *Work, err error) {
	g.flight.End(w.flightID, err)
	w.err = g.attribute(w.name, err)
	if w.err != nil {
		g.fail(w.err)
	}
	close(w.done)
}

// finishOffExecutor completes w once tail returns, on a goroutine Destroy
// waits for (a send waiting for its bytes to leave, a started
// point-to-point operation).
func (g *ProcessGroup) finishOffExecutor(w *Work, tail func() error) {
	g.tails.Add(1)
	go func() {
		defer g.tails.Done()
		g.complete(w, tail())
	}()
}

// attribute makes an operation's error name the operation.
func (g *ProcessGroup) attribute(op string, err error) error {
	var pe *PeerError
	if err == nil {
		return nil
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return fmt.Errorf("ddp: %s on rank %d: %w: Destroy was called while it ran", op, g.rank, ErrGroupClosed)
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
	g.t.Abort(err)
	g.dumpFlight(err.Error())
}

// Destroy ends the group. Operations still queued or running fail with
// ErrGroupClosed (a running one is interrupted by closing the
// connections), so Destroy returns promptly; then rank 0 stops the store
// it hosted. Shared buffers are released: using one afterwards is an
// error (ErrGroupClosed), and a slice taken from one before reads zeros
// instead of faulting.
//
// Under the mpi backend, operations already issued still run, since MPI
// cannot tell the other ranks they were dropped: together they get 5 s to
// finish before the job is aborted. Destroying the last mpi group
// finalizes MPI, which cannot start again in that process.
//
// Deferred in a goroutine that panics (defer g.Destroy()), it writes the
// panic into the flight record, and on the mpi backend to stderr first
// (its other ranks abort the job once this one has left, before Go would
// print it), then lets the panic go on.
func (g *ProcessGroup) Destroy() error {
	if p := recover(); p != nil {
		defer panic(p)
		return g.destroy(p)
	}
	return g.destroy(nil)
}

// destroy is Destroy, in a goroutine panicking with p if p is not nil.
func (g *ProcessGroup) destroy(p any) error {
	g.submitMu.Lock()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.submitMu.Unlock()
		return nil
	}
	g.closed = true
	healthy := g.broken == nil // a failure's flight dump stays as it is
	drain := g.features.DrainOnDestroy
	if g.broken == nil && !drain {
		g.broken = fmt.Errorf("ddp: rank %d: %w: it was destroyed", g.rank, ErrGroupClosed)
	}
	g.mu.Unlock()
	close(g.ops)
	g.submitMu.Unlock()
	g.stopSignals()
	g.t.Interrupt() // a running operation returns (or, draining, gets its grace)
	g.wg.Wait()
	g.tails.Wait()
	g.mu.Lock()
	if g.broken == nil {
		g.broken = fmt.Errorf("ddp: rank %d: %w: it was destroyed", g.rank, ErrGroupClosed)
	}
	last := g.seq
	g.mu.Unlock()
	switch {
	case p != nil:
		if g.transport == TransportMPI {
			fmt.Fprintf(os.Stderr, "panic: %v\n\n%s\n", p, debug.Stack())
		}
		g.dumpFlight(fmt.Sprintf("panic: %v", p))
	case healthy:
		g.dumpFlight("destroyed")
	}
	return g.t.Close(last)
}
