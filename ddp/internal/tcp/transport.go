package tcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/reduce"
)

// Name is the transport's registered name, the process group's default.
const Name = "tcp"

func init() { transport.Register(Name, open) }

// Names the moved code reads unqualified.
type (
	Buffer    = transport.Buffer
	DType     = transport.DType
	ReduceOp  = reduce.Op
	PeerError = transport.PeerError
)

var (
	ErrPeerClosed  = transport.ErrPeerClosed
	ErrTimeout     = transport.ErrTimeout
	ErrMismatch    = transport.ErrMismatch
	ErrGroupClosed = transport.ErrGroupClosed
)

// group is one rank's side of the TCP and shared-memory transport: the
// store it rendezvoused through, a connection to every peer, and the
// same-host segment when all ranks share a host.
type group struct {
	rank, size                int
	localRank, localWorldSize int
	timeout                   time.Duration
	debug                     bool
	store                     store.Store
	storeServer               *store.Server
	peers                     []*peer // indexed by rank; nil for self
	// shm is set when all ranks share this host (shm.go).
	shm *shmState
	// opDesc is the descriptor of the collective running (checkSame sets
	// it); only the goroutine running the group's calls uses it.
	opDesc uint64
	// sharedMemoryAllReduces counts all-reduces that took the
	// shared-memory path.
	sharedMemoryAllReduces atomic.Int64
	// broken is the group's failure, or nil (transport.Config.Broken).
	broken func() error
}

// Inline lets a small all-reduce run on the caller's goroutine on a
// same-host group (shm_fast.go), outside debug mode.
func (g *group) Inline(c transport.Call) bool {
	return c.Kind == transport.AllReduce && g.smallPath(c.Buf) && !g.debug
}

// smallPath reports whether an all-reduce of buf takes the same-host fast path.
func (g *group) smallPath(buf Buffer) bool {
	return g.shm != nil && g.size > 1 && len(buf.Bytes()) > 0 && len(buf.Bytes()) <= shmRegionBytes
}

// Run performs collective c (and Recv, which the group runs in order).
func (g *group) Run(c transport.Call) error {
	if c.Deadline.IsZero() {
		c.Deadline = time.Now().Add(g.timeout)
	}
	seq, deadline := c.Seq, c.Deadline
	if c.Kind == transport.AllReduce && g.smallPath(c.Buf) {
		if err := g.debugCheck(seq, c.Describe(), deadline); err != nil {
			return err
		}
		ctx := c.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		return g.smallAllReduce(ctx, seq, c.Buf, c.Op, deadline)
	}
	if c.Kind == transport.Recv {
		if err := g.peers[c.Root].recv(kindP2P, uint64(c.Tag), p2pDescriptor(c.Buf), c.Buf.Bytes(), deadline); err != nil {
			return peerError(c.Root, err)
		}
		return nil
	}
	if err := g.checkSame(seq, c.Describe(), deadline); err != nil {
		return err
	}
	switch c.Kind {
	case transport.AllReduce:
		return g.allReduce(seq, c.Buf, c.Op, deadline)
	case transport.Broadcast:
		return g.broadcast(seq, c.Buf, c.Root, deadline)
	case transport.AllGather:
		return g.allGather(seq, c.Out, c.In, deadline)
	case transport.ReduceScatter:
		return g.reduceScatter(seq, c.Out, c.In, c.Op, deadline)
	case transport.AllToAll:
		return g.allToAll(seq, c, deadline)
	case transport.Gather:
		return g.gather(seq, c.Out, c.In, c.Root, deadline)
	case transport.Scatter:
		return g.scatter(seq, c.Out, c.In, c.Root, deadline)
	case transport.Barrier:
		_, err := g.exchange(kindCollective, seq, 0, nil, deadline)
		return err
	}
	return fmt.Errorf("ddp: the tcp transport has no %s", c.Describe())
}

// Start queues a Send's bytes on the connection; wait returns once they
// have left this process. A Recv runs whole (Run).
func (g *group) Start(c transport.Call) (func() error, error) {
	if c.Kind != transport.Send {
		return nil, g.Run(c)
	}
	if c.Deadline.IsZero() {
		c.Deadline = time.Now().Add(g.timeout)
	}
	dst := c.Root
	job := g.peers[dst].send(kindP2P, uint64(c.Tag), p2pDescriptor(c.Buf), c.Buf.Bytes(), c.Deadline)
	return func() error { return waitAll([]sentJob{{dst, job}}) }, nil
}

// p2pDescriptor lets a Recv check that the Send matching its tag sent the
// same dtype (the length is checked apart).
func p2pDescriptor(b Buffer) uint64 { return descriptor("P2P " + b.DType.String()) }

// Abort tells every peer why the group failed (so ranks blocked on this
// one learn the cause) and wakes peers waiting in shared memory.
func (g *group) Abort(cause error) {
	if g.shm != nil {
		g.shm.abort(g.rank)
	}
	culprit := -1
	var pe *PeerError
	if errors.As(cause, &pe) {
		culprit = pe.Rank
	}
	var wg sync.WaitGroup
	for _, p := range g.peers {
		if p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.abort(cause.Error(), culprit)
			}()
		}
	}
	wg.Wait()
}

// Interrupt closes the connections, which ends any call in flight.
func (g *group) Interrupt() {
	for _, p := range g.peers {
		if p != nil {
			p.close()
		}
	}
}

// storeDrainTimeout bounds how long the store host's Close waits for the
// other ranks to leave the store.
const storeDrainTimeout = 5 * time.Second

// Close shuts the connections and the shared memory down, and on rank 0
// stops the store it hosted once the other ranks have left it.
func (g *group) Close(uint64) error {
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
		// Ranks still finishing a store request (the last rendezvous
		// barrier, a mismatch report) get their answer: wait, briefly,
		// for them to disconnect.
		errs = append(errs, g.storeServer.Drain(storeDrainTimeout))
	}
	return errors.Join(errs...)
}

// HasSharedMemory reports whether the group set up the same-host segment.
func (g *group) HasSharedMemory() bool { return g.shm != nil }

// SharedMemoryAllReduces counts the all-reduces that took shared memory.
func (g *group) SharedMemoryAllReduces() int64 { return g.sharedMemoryAllReduces.Load() }

// peerError wraps an I/O failure with the peer it came from; a failure
// another rank reported keeps that rank's account of the cause.
func peerError(rank int, err error) error {
	var ab *abortError
	if errors.As(err, &ab) {
		// A mismatch another rank found is this rank's mismatch too.
		var cause error = errors.New(ab.msg)
		if strings.Contains(ab.msg, ErrMismatch.Error()) {
			cause = &transport.MismatchError{Msg: ab.msg}
		}
		if ab.culprit >= 0 {
			return &PeerError{Rank: ab.culprit, Err: fmt.Errorf("failed, as rank %d reports (%w)", ab.from, cause)}
		}
		return &PeerError{Rank: ab.from, Err: fmt.Errorf("aborted: %w", cause)}
	}
	return &PeerError{Rank: rank, Err: err}
}
