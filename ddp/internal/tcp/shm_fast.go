package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"golang.org/x/sys/unix"
)

// The same-host fast path for small all-reduces. Each rank's slot starts
// with a control line and two data regions. A rank copies its buffer into
// region seq%2, then publishes seq (and the operation's descriptor) in its
// control line; when every peer has published seq, it folds all regions
// in rank order into its buffer, so every rank computes the identical
// result. No frame, syscall, allocation or goroutine hand-off: a 4 KiB
// all-reduce costs a few copies and cache-line transfers.
//
// Every collective publishes its sequence number when it starts, whatever
// its path, so a rank also knows that a peer at seq has finished seq-1:
// region seq%2 is rewritten only once every peer has published seq-1,
// having finished reading it at seq-2. A waiting rank spins briefly, then
// sleeps on the peer's sequence word (a futex, woken by the publisher
// only when someone sleeps), checking every millisecond its deadline, its
// ctx, its group, the peer's abort flag and the peer's connection.

const (
	shmControlBytes = 64
	shmRegionBytes  = shmMinBytes
	// shmHeaderBytes is the control line and the two regions, page aligned.
	shmHeaderBytes = (shmControlBytes + 2*shmRegionBytes + 4095) &^ 4095
	// spinChecks and yieldChecks bound the busy phases of a wait.
	spinChecks  = 2000
	yieldChecks = 200
	pollEvery   = time.Millisecond
)

// shmControl is a rank's control line in shared memory. state holds the
// last collective the rank started: its sequence number (low 32 bits,
// the futex word) and its descriptor's low 32 bits, stored together so a
// reader never pairs one collective's number with another's descriptor.
type shmControl struct {
	state   atomic.Uint64
	waiters atomic.Uint32
	aborted atomic.Uint32
}

func packState(seq, desc uint64) uint64 { return desc<<32 | seq&0xffffffff }

// since returns how many collectives state's is past seq (negative: before).
func since(state, seq uint64) int32 { return int32(uint32(state) - uint32(seq)) }

func (s *shmState) control(rank int) *shmControl {
	return (*shmControl)(unsafe.Pointer(&s.slotOf(rank)[0]))
}

func (s *shmState) region(rank int, seq uint64) []byte {
	off := shmControlBytes + int(seq&1)*shmRegionBytes
	return s.slotOf(rank)[off : off+shmRegionBytes]
}

// publish announces that rank started collective seq described by desc.
func (s *shmState) publish(rank int, seq, desc uint64) {
	c := s.control(rank)
	c.state.Store(packState(seq, desc))
	if c.waiters.Load() > 0 {
		futexWake(&c.state)
	}
}

// abort flags rank's group as broken for peers waiting on it.
func (s *shmState) abort(rank int) {
	if s.released.Load() {
		return
	}
	c := s.control(rank)
	c.aborted.Store(1)
	futexWake(&c.state) // sleepers recheck and see the flag
}

// smallDesc describes a small all-reduce without allocating.
func smallDesc(buf Buffer, op ReduceOp) uint64 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(buf.DType))
	binary.LittleEndian.PutUint64(b[8:], uint64(buf.Len()))
	binary.LittleEndian.PutUint64(b[16:], uint64(op))
	h := fnv.New64a()
	_, _ = h.Write([]byte("AllReduce/small"))
	_, _ = h.Write(b[:])
	return h.Sum64()
}

// smallAllReduce is the fast path (len(buf.Bytes()) <= shmRegionBytes).
func (g *group) smallAllReduce(ctx context.Context, seq uint64, buf Buffer, op ReduceOp, deadline time.Time) error {
	s := g.shm
	desc := smallDesc(buf, op)
	g.opDesc = desc
	n := len(buf.Bytes())
	// Peers must be done reading region seq%2 from collective seq-2.
	for q := range g.size {
		if q != g.rank {
			if err := g.awaitPeer(ctx, q, seq-1, 0, deadline); err != nil {
				return err
			}
		}
	}
	copy(s.region(g.rank, seq)[:n], buf.Bytes())
	s.publish(g.rank, seq, desc)
	for q := range g.size {
		if q != g.rank {
			if err := g.awaitPeer(ctx, q, seq, desc, deadline); err != nil {
				return err
			}
		}
	}
	if g.rank != 0 {
		copy(buf.Bytes(), s.region(0, seq)[:n])
	}
	for q := 1; q < g.size; q++ {
		transport.ReduceInto(buf, transport.ByteBuffer(buf.DType, s.region(q, seq)[:n]), op)
	}
	return nil
}

// awaitPeer waits until rank q has started collective seq or a later
// one; a nonzero desc must match q's descriptor if q is at seq. A q past
// seq has checked the same against this rank (or it could not have
// finished seq without this rank: a rooted collective's root waits for
// every rank, and its state shows its own descriptor), so a mismatch is
// always seen by some rank.
func (g *group) awaitPeer(ctx context.Context, q int, seq, desc uint64, deadline time.Time) error {
	c := g.shm.control(q)
	reached := func() (bool, error) {
		state := c.state.Load()
		switch d := since(state, seq); {
		case d < 0:
			return false, nil
		case d == 0 && desc != 0 && state>>32 != desc&0xffffffff:
			return true, g.peers[q].mismatch(fmt.Sprintf("ran a different collective #%d", seq))
		}
		return true, nil
	}
	for i := 0; ; i++ {
		if ok, err := reached(); ok {
			return err
		}
		switch {
		case i < spinChecks:
			continue
		case i < spinChecks+yieldChecks:
			// Give the core to another process: with more ranks than
			// cores, the peer being waited for may need it.
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		c.waiters.Add(1)
		if v := c.state.Load(); since(v, seq) < 0 && c.aborted.Load() == 0 {
			futexWait(&c.state, uint32(v), pollEvery)
		}
		c.waiters.Add(^uint32(0))
		if ok, err := reached(); ok {
			return err
		}
		if err := g.stillWaiting(ctx, q, seq, deadline); err != nil {
			return err
		}
	}
}

// stillWaiting returns why a wait for peer q must end, if it must.
func (g *group) stillWaiting(ctx context.Context, q int, seq uint64, deadline time.Time) error {
	broken := g.broken()
	switch {
	case broken != nil:
		return broken
	case ctx.Err() != nil:
		return fmt.Errorf("ddp: rank %d stopped waiting for rank %d: %w; the process group is broken, since the operation "+
			"could not finish without this rank (destroy it and start a new one)", g.rank, q, context.Cause(ctx))
	case g.shm.control(q).aborted.Load() != 0:
		// Its abort frame says why.
		err := g.peers[q].recv(kindCollective, tag(seq, 0, 0), g.opDesc, nil, time.Now().Add(2*time.Second))
		if err == nil {
			err = errors.New("aborted the group")
		}
		return peerError(q, err)
	case !g.peers[q].alive():
		return &PeerError{Rank: q, Err: ErrPeerClosed}
	case time.Now().After(deadline):
		return &PeerError{Rank: q, Err: fmt.Errorf("timed out: it did not reach collective #%d in time (a stalled rank, or one that skipped a collective)", seq)}
	}
	return nil
}

// alive peeks at the connection without consuming: false once the peer
// closed it (its process is gone) and nothing is left to read.
func (p *peer) alive() bool {
	sc, ok := p.conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0: // orderly close
			alive = false
		case err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
			alive = false
		}
	})
	return alive
}

// Linux futex operations, shared (not FUTEX_PRIVATE): the word lives in
// memory every rank maps.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

func futexWait(addr *atomic.Uint64, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(timeout.Nanoseconds())
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *atomic.Uint64) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<30), 0, 0, 0)
}
