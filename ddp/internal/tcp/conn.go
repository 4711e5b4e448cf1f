package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// Frame kinds on a peer connection.
const (
	kindCollective uint32 = iota + 1
	kindP2P
	kindDebug
	kindAbort
)

const (
	frameMagic      = 0x58444450 // "XDDP"
	frameHeaderSize = 32         // magic, kind (4 bytes each), tag, descriptor, length (8 each)
	// maxStashed bounds out-of-order frames held for a later receive.
	maxStashed = 1 << 16
)

type stashKey struct {
	kind uint32
	tag  uint64
}

// stashedFrame is a frame that arrived before its receive.
type stashedFrame struct {
	desc    uint64
	payload []byte
}

// sendJob is one frame queued for a connection's writer goroutine.
type sendJob struct {
	header   [frameHeaderSize]byte
	payload  []byte
	deadline time.Time
	done     chan error
}

// peer is the connection to one other rank.
type peer struct {
	rank  int
	conn  net.Conn
	sendq chan *sendJob
	// stash holds frames that arrived before the receive expecting them.
	stash   map[stashKey][]stashedFrame
	stashed int
	wg      sync.WaitGroup
}

func newPeer(rank int, conn net.Conn) *peer {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true)
		_ = tcp.SetReadBuffer(4 << 20)
		_ = tcp.SetWriteBuffer(4 << 20)
	}
	p := &peer{rank: rank, conn: conn, sendq: make(chan *sendJob, 1024), stash: map[stashKey][]stashedFrame{}}
	p.wg.Add(1)
	go p.writer()
	return p
}

func (p *peer) writer() {
	defer p.wg.Done()
	var failed error
	for job := range p.sendq {
		if failed != nil {
			job.done <- failed
			continue
		}
		_ = p.conn.SetWriteDeadline(job.deadline)
		bufs := net.Buffers{job.header[:], job.payload}
		if _, err := bufs.WriteTo(p.conn); err != nil {
			failed = p.wrapIOError(err)
		}
		job.done <- failed
	}
}

// send queues a frame; its payload must not change until the job is done.
// desc describes the operation the frame belongs to (descriptor): the
// receiver checks it, so ranks that disagree on an operation fail.
func (p *peer) send(kind uint32, tag, desc uint64, payload []byte, deadline time.Time) *sendJob {
	job := &sendJob{payload: payload, deadline: deadline, done: make(chan error, 1)}
	binary.BigEndian.PutUint32(job.header[0:], frameMagic)
	binary.BigEndian.PutUint32(job.header[4:], kind)
	binary.BigEndian.PutUint64(job.header[8:], tag)
	binary.BigEndian.PutUint64(job.header[16:], desc)
	binary.BigEndian.PutUint64(job.header[24:], uint64(len(payload)))
	p.sendq <- job
	return job
}

// descriptor hashes an operation's description (kind, dtype, length,
// reduce op, root) into the 8 bytes every frame of it carries.
func descriptor(description string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(description))
	return h.Sum64()
}

// mismatch is the error of a frame whose operation differs from the one
// this rank runs.
func (p *peer) mismatch(what string) error {
	return &transport.MismatchError{Msg: fmt.Sprintf("%v: rank %d %s (every rank must issue the same collectives, with the same "+
		"dtype, length, reduce op and root, in the same order; XLADDP_DISTRIBUTED_DEBUG=1 names each rank's call)", ErrMismatch, p.rank, what)}
}

// wrapIOError turns a socket error into ErrPeerClosed or ErrTimeout.
func (p *peer) wrapIOError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return ErrTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return ErrPeerClosed
	}
	return fmt.Errorf("%w: %v", ErrPeerClosed, err)
}

// abortError carries a failure another rank reported: which rank it
// blames (culprit, -1 if none) and its message.
type abortError struct {
	from, culprit int
	msg           string
}

func (e *abortError) Error() string { return fmt.Sprintf("rank %d aborted: %s", e.from, e.msg) }

// recv reads the frame (kind, tag) into dst, whose length must equal the
// frame's and whose operation must be desc; frames for other receives are
// stashed.
func (p *peer) recv(kind uint32, tag, desc uint64, dst []byte, deadline time.Time) error {
	key := stashKey{kind, tag}
	if frames := p.stash[key]; len(frames) > 0 {
		p.stash[key] = frames[1:]
		p.stashed--
		if err := p.check(frames[0].desc, uint64(len(frames[0].payload)), desc, dst); err != nil {
			return err
		}
		copy(dst, frames[0].payload)
		return nil
	}
	_ = p.conn.SetReadDeadline(deadline)
	for {
		h, err := p.readHeader()
		if err != nil {
			return err
		}
		if h.kind == kindAbort {
			msg := make([]byte, min(h.n, 1<<16))
			_, _ = io.ReadFull(p.conn, msg)
			return &abortError{from: p.rank, culprit: int(h.tag) - 1, msg: string(msg)}
		}
		if h.kind == kindCollective && kind == kindCollective {
			if err := p.checkCollective(h, tag, desc); err != nil {
				return err
			}
		}
		if h.kind == kind && h.tag == tag {
			if err := p.check(h.desc, h.n, desc, dst); err != nil {
				return err
			}
			if _, err := io.ReadFull(p.conn, dst); err != nil {
				return p.wrapIOError(err)
			}
			return nil
		}
		if err := p.stashFrame(h); err != nil {
			return err
		}
	}
}

// check is the error of a frame describing gotDesc with n bytes, received
// for an operation described by desc into dst, or nil where they match.
func (p *peer) check(gotDesc, n, desc uint64, dst []byte) error {
	switch {
	case gotDesc != desc:
		return p.mismatch("sent a frame of another operation")
	case n != uint64(len(dst)):
		return p.mismatch(fmt.Sprintf("sent %d bytes where this rank expects %d", n, len(dst)))
	}
	return nil
}

// frameHeader is a frame's header after its magic: its kind, tag,
// descriptor and payload size.
type frameHeader struct {
	kind         uint32
	tag, desc, n uint64
}

// readHeader reads the next frame's header.
func (p *peer) readHeader() (frameHeader, error) {
	var header [frameHeaderSize]byte
	if _, err := io.ReadFull(p.conn, header[:]); err != nil {
		return frameHeader{}, p.wrapIOError(err)
	}
	if binary.BigEndian.Uint32(header[0:]) != frameMagic {
		return frameHeader{}, fmt.Errorf("protocol: bad frame magic 0x%08x (not an xladdp peer, or a corrupted stream)", binary.BigEndian.Uint32(header[0:]))
	}
	return frameHeader{kind: binary.BigEndian.Uint32(header[4:]), tag: binary.BigEndian.Uint64(header[8:]),
		desc: binary.BigEndian.Uint64(header[16:]), n: binary.BigEndian.Uint64(header[24:])}, nil
}

// checkCollective checks a collective's frame h received while waiting
// for the frame tag of the collective described by desc.
func (p *peer) checkCollective(h frameHeader, tag, desc uint64) error {
	// A frame of this collective at another step must describe the
	// same operation; one of an earlier collective means a rank
	// ran a collective this rank finished without it.
	frameSeq, seq := h.tag>>32, tag>>32
	switch {
	case frameSeq == seq && h.desc != desc:
		return p.mismatch("sent a frame of another operation")
	case frameSeq < seq:
		return p.mismatch(fmt.Sprintf("sent a frame of collective #%d, which this rank finished without it", frameSeq))
	}
	return nil
}

// stashFrame reads the payload of a frame not awaited yet and keeps it
// for the recv that awaits it, within the stash's bounds.
func (p *peer) stashFrame(h frameHeader) error {
	if p.stashed >= maxStashed || h.n > 1<<30 {
		return fmt.Errorf("protocol: too many unexpected frames (kind %d tag %d): sends and receives do not match", h.kind, h.tag)
	}
	frame := make([]byte, h.n)
	if _, err := io.ReadFull(p.conn, frame); err != nil {
		return p.wrapIOError(err)
	}
	sk := stashKey{h.kind, h.tag}
	p.stash[sk] = append(p.stash[sk], stashedFrame{desc: h.desc, payload: frame})
	p.stashed++
	return nil
}

// abort tells the peer why this rank is leaving and which rank it blames
// (-1 for none), best effort, and closes.
func (p *peer) abort(msg string, culprit int) {
	job := p.send(kindAbort, uint64(culprit+1), 0, []byte(msg), time.Now().Add(500*time.Millisecond))
	select {
	case <-job.done:
	case <-time.After(time.Second):
	}
	p.close()
}

func (p *peer) close() {
	_ = p.conn.Close()
}

// shutdown stops the writer after queued frames are written.
func (p *peer) shutdown() {
	close(p.sendq)
	p.wg.Wait()
	_ = p.conn.Close()
}
