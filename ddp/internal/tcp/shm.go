package tcp

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"golang.org/x/sys/unix"
)

// Same-host all-reduce through shared memory. When every rank runs on
// this host, rank 0 creates a segment in /dev/shm with one slot per rank,
// reserved up front (fallocate), so touching it can never fault, and every
// rank maps all slots. A slot starts with the small all-reduce's control
// line and regions (shm_fast.go), then holds buffers handed out by SharedBuffer (all-reduced
// in place: each rank reduces its part straight from every peer's memory,
// then copies the other reduced parts) and a staging area through which
// ordinary buffers are copied in and out in rounds. The TCP connections
// carry only the barriers between phases, and still detect a rank that dies.

const (
	// shmMinBytes: smaller all-reduces use the direct or ring paths.
	shmMinBytes = 256 << 10
	// EnvShmMiB sets each rank's shared-memory slot in MiB (0 disables the
	// shared-memory path): transport.SlotMiB reads it.
	EnvShmMiB  = transport.EnvShmMiB
	SegmentDir = "/dev/shm"
	// stagingFraction of a slot is kept for staging ordinary buffers.
	stagingFraction = 4
)

// shmState is a mapped segment.
type shmState struct {
	mem      []byte // all slots
	slot     int    // bytes per rank
	staging  int    // bytes after each slot's header used for staging
	mu       sync.Mutex
	arenaTop int // next free byte of this rank's arena (after staging)
	path     string
	// released is set by Destroy: SharedBuffers are no longer usable.
	released atomic.Bool
}

// Released reports whether Destroy gave the segment back: its
// SharedBuffers are no longer usable.
func (s *shmState) Released() bool { return s.released.Load() }

// slotOf returns rank q's slot.
func (s *shmState) slotOf(q int) []byte { return s.mem[q*s.slot : (q+1)*s.slot] }

func shmSlotBytes() (int, error) {
	n, err := transport.SlotMiB(os.Getenv)
	return n << 20, err
}

// SegmentPrefix names this package's segments in /dev/shm; the creator's
// pid follows, so segments a killed job left can be found and removed.
const SegmentPrefix = "xladdp-"

// removeStaleSegments deletes segments whose creating process is gone:
// a rank killed between creating a segment and unlinking it leaves one.
func removeStaleSegments(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), SegmentPrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// setupShm decides with every rank whether the shared-memory path is
// usable (all ranks on one host, the segment created and mapped by all).
func (g *group) setupShm(ctx context.Context, hosts []string, groupID []byte) error {
	local := g.size > 1
	for _, h := range hosts {
		local = local && h == hosts[0]
	}
	slot, err := shmSlotBytes()
	if err != nil {
		return err
	}
	if !local || slot < 4<<20 {
		return nil
	}
	if g.rank == 0 {
		created, err := g.publishSegment(ctx, groupID, slot)
		if created != "" {
			// Unlinked on every way out; a kill before that leaves a
			// segment the next job's removeStaleSegments deletes.
			defer os.Remove(created)
		}
		if err != nil {
			return err
		}
	}
	mem, path, err := g.mapPublished(ctx, groupID, slot)
	if err != nil {
		return err
	}
	all, err := g.allMapped(ctx)
	if err != nil {
		return err
	}
	// Every rank has mapped (or given up on) the segment: unlink its name
	// so it disappears with the last process, even one that crashes.
	if err := g.storeBarrier(ctx); err != nil {
		if mem != nil {
			_ = unix.Munmap(mem)
		}
		return err
	}
	if !all {
		if mem != nil {
			_ = unix.Munmap(mem)
		}
		return nil
	}
	staging := (slot - shmHeaderBytes) / stagingFraction
	g.shm = &shmState{mem: mem, slot: slot, staging: staging, arenaTop: shmHeaderBytes + staging, path: path}
	return nil
}

// publishSegment (rank 0) removes the segments of dead jobs, creates the
// group's, and publishes its path, "" where it could not create it. It
// returns the path it created, for the caller to unlink, even with an
// error.
func (g *group) publishSegment(ctx context.Context, groupID []byte, slot int) (created string, err error) {
	removeStaleSegments(SegmentDir)
	path := filepath.Join(SegmentDir, fmt.Sprintf("%s%d-%s", SegmentPrefix, os.Getpid(), hex.EncodeToString(groupID)))
	if createSegment(path, g.size*slot) == nil {
		created = path
	} else {
		path = ""
	}
	return created, g.store.Set(ctx, "shm/path", []byte(path))
}

// mapPublished maps the segment rank 0 published, where it is one of this
// group's, and tells the other ranks whether it could.
func (g *group) mapPublished(ctx context.Context, groupID []byte, slot int) (mem []byte, path string, err error) {
	name := SegmentPrefix + hex.EncodeToString(groupID)
	pathValue, err := g.store.Get(ctx, "shm/path")
	if err != nil {
		return nil, "", err
	}
	path = string(pathValue)
	if path != "" && filepath.Dir(path) == SegmentDir && strings.HasPrefix(filepath.Base(path), SegmentPrefix) && strings.HasSuffix(path, name[len(SegmentPrefix):]) {
		mem, err = mapSegment(path, g.size*slot)
	}
	v := "0"
	if mem != nil && err == nil {
		v = "1"
	}
	if err := g.store.Set(ctx, fmt.Sprintf("shm/ok/%d", g.rank), []byte(v)); err != nil {
		return nil, "", err
	}
	return mem, path, nil
}

// allMapped reports whether every rank mapped the segment.
func (g *group) allMapped(ctx context.Context) (bool, error) {
	all := true
	for r := range g.size {
		v, err := g.store.Get(ctx, fmt.Sprintf("shm/ok/%d", r))
		if err != nil {
			return false, err
		}
		all = all && string(v) == "1"
	}
	return all, nil
}

// storeBarrier waits for every rank through the store (before the executor runs).
func (g *group) storeBarrier(ctx context.Context) error {
	if err := g.store.Set(ctx, fmt.Sprintf("shm/mapped/%d", g.rank), []byte("1")); err != nil {
		return err
	}
	keys := make([]string, g.size)
	for r := range keys {
		keys[r] = fmt.Sprintf("shm/mapped/%d", r)
	}
	return g.store.Wait(ctx, keys...)
}

func createSegment(path string, size int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// Reserve the memory now: on tmpfs, touching an unreserved page of a
	// full /dev/shm would kill the process with SIGBUS.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

func mapSegment(path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || info.Size() != int64(size) {
		return nil, fmt.Errorf("ddp: shared segment %s has the wrong size", path)
	}
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// SharedBuffer returns a zeroed buffer of n elements in this rank's shared
// memory, when the group has a shared-memory segment (all ranks on one
// host). All-reduces of such buffers run in place at memory speed, so it
// suits buffers reduced every step, like DDP's gradient buckets. Every
// rank must allocate the same buffers in the same order. The buffer lives
// until Destroy. Without shared memory it is an ordinary buffer.
func (g *group) SharedBuffer(dtype DType, n int) (Buffer, error) {
	if err := (Buffer{DType: dtype}).Check("SharedBuffer"); err != nil {
		return Buffer{}, err
	}
	size := n * dtype.Size()
	if g.shm == nil {
		return transport.ByteBuffer(dtype, make([]byte, size)), nil
	}
	s := g.shm
	s.mu.Lock()
	defer s.mu.Unlock()
	start := (s.arenaTop + 63) &^ 63
	if start+size > s.slot {
		return Buffer{}, fmt.Errorf("ddp: SharedBuffer of %d bytes: only %d of this rank's %d-MiB shared slot are left (raise $%s)",
			size, s.slot-start, s.slot>>20, EnvShmMiB)
	}
	s.arenaTop = start + size
	b := s.slotOf(g.rank)[start : start+size]
	clear(b)
	return transport.LeasedBuffer(dtype, b, s), nil
}

// offsetInSlot returns where b starts in this rank's slot, or -1.
func (s *shmState) offsetInSlot(rank int, b []byte) int {
	if len(b) == 0 {
		return -1
	}
	slot := s.slotOf(rank)
	start := uintptr(unsafe.Pointer(&slot[0]))
	p := uintptr(unsafe.Pointer(&b[0]))
	if p < start || p+uintptr(len(b)) > start+uintptr(len(slot)) {
		return -1
	}
	return int(p - start)
}

// shmAllReduce all-reduces buf through shared memory: in place if every
// rank's buf is a SharedBuffer, else in rounds through the staging areas.
func (g *group) shmAllReduce(seq uint64, buf Buffer, op ReduceOp, deadline time.Time) error {
	s := g.shm
	g.sharedMemoryAllReduces.Add(1)
	off := s.offsetInSlot(g.rank, buf.Bytes())
	msg := binary.BigEndian.AppendUint64(nil, uint64(int64(off)))
	got, err := g.exchange(kindCollective, seq, 0, msg, deadline)
	if err != nil {
		return err
	}
	offsets := make([]int, g.size)
	inPlace := true
	for q := range g.size {
		offsets[q] = off
		if q != g.rank {
			offsets[q] = int(int64(binary.BigEndian.Uint64(got[q])))
		}
		inPlace = inPlace && offsets[q] >= 0
	}
	if inPlace {
		return g.shmReduce(seq, 1, buf, offsets, op, deadline)
	}
	// Staging: every rank takes the same path, round by round.
	per := s.staging / buf.DType.Size()
	stage := make([]int, g.size) // every slot's staging area
	for q := range stage {
		stage[q] = shmHeaderBytes
	}
	step := 1
	for lo := 0; lo < buf.Len(); lo += per {
		part := buf.Slice(lo, min(lo+per, buf.Len()))
		staged := transport.ByteBuffer(buf.DType, s.slotOf(g.rank)[shmHeaderBytes:shmHeaderBytes+len(part.Bytes())])
		copy(staged.Bytes(), part.Bytes())
		if _, err := g.exchange(kindCollective, seq, step, nil, deadline); err != nil {
			return err
		}
		if err := g.shmReduce(seq, step+1, staged, stage, op, deadline); err != nil {
			return err
		}
		copy(part.Bytes(), staged.Bytes())
		step += 3
	}
	return nil
}

// shmReduce all-reduces the region of each rank's slot at offsets[q]
// (mine is buf): reduce-scatter straight from the peers' memory, barrier,
// all-gather of the reduced parts, barrier.
func (g *group) shmReduce(seq uint64, step int, buf Buffer, offsets []int, op ReduceOp, deadline time.Time) error {
	s := g.shm
	n, r := g.size, g.rank
	size := buf.DType.Size()
	b := bounds(buf.Len(), n)
	peerPart := func(q, part int) Buffer {
		lo, hi := offsets[q]+b[part]*size, offsets[q]+b[part+1]*size
		return transport.ByteBuffer(buf.DType, s.slotOf(q)[lo:hi])
	}
	foldInRankOrder(buf.Slice(b[r], b[r+1]), r, n, func(q int) Buffer { return peerPart(q, r) }, op)
	if _, err := g.exchange(kindCollective, seq, step, nil, deadline); err != nil {
		return err
	}
	for q := range n {
		if q != r {
			copy(buf.Slice(b[q], b[q+1]).Bytes(), peerPart(q, q).Bytes())
		}
	}
	// Peers still read this rank's part until everyone has copied.
	_, err := g.exchange(kindCollective, seq, step+1, nil, deadline)
	return err
}

// foldInRankOrder combines the n ranks' parts into own (rank r's part,
// which it holds) as ((p0 ∘ p1) ∘ p2) ∘ ... in rank order, the order
// every other same-host reduction folds in, so that an all-reduce and a
// reduce-scatter of the same values agree bit for bit whichever rank
// owns a chunk. The ops are commutative, so p_r ∘ acc = acc ∘ p_r.
func foldInRankOrder(own Buffer, r, n int, part func(q int) Buffer, op ReduceOp) {
	if r > 0 {
		acc := transport.ByteBuffer(own.DType, append([]byte(nil), part(0).Bytes()...))
		for q := 1; q < r; q++ {
			transport.ReduceInto(acc, part(q), op)
		}
		transport.ReduceInto(own, acc, op)
	}
	for q := r + 1; q < n; q++ {
		transport.ReduceInto(own, part(q), op)
	}
}

// shmReduceScatter reduce-scatters through the staging areas, window by
// window: every rank stages its window of in, and each folds its block's
// part of the window from every rank's staging area in rank order.
func (g *group) shmReduceScatter(seq uint64, out, in Buffer, op ReduceOp, deadline time.Time) error {
	s := g.shm
	size := in.DType.Size()
	per := s.staging / size
	mineLo, mineHi := g.rank*out.Len(), (g.rank+1)*out.Len()
	step := 0
	for lo := 0; lo < in.Len(); lo += per {
		hi := min(lo+per, in.Len())
		copy(s.slotOf(g.rank)[shmHeaderBytes:], in.Slice(lo, hi).Bytes())
		if _, err := g.exchange(kindCollective, seq, step, nil, deadline); err != nil {
			return err
		}
		if a, b := max(lo, mineLo), min(hi, mineHi); a < b {
			staged := func(q int) Buffer {
				return transport.ByteBuffer(in.DType, s.slotOf(q)[shmHeaderBytes+(a-lo)*size:shmHeaderBytes+(b-lo)*size])
			}
			dst := out.Slice(a-mineLo, b-mineLo)
			copy(dst.Bytes(), staged(0).Bytes())
			for q := 1; q < g.size; q++ {
				transport.ReduceInto(dst, staged(q), op)
			}
		}
		// Peers read this rank's staging area until everyone has folded.
		if _, err := g.exchange(kindCollective, seq, step+1, nil, deadline); err != nil {
			return err
		}
		step += 2
	}
	return nil
}

// close releases the segment. Its pages are replaced by private zero
// pages at the same addresses instead of unmapped: a slice of a
// SharedBuffer the caller kept then reads zeros rather than crashing the
// process. The shared memory itself is freed.
func (s *shmState) close() {
	if s == nil || s.mem == nil {
		return
	}
	s.released.Store(true)
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&s.mem[0]), uintptr(len(s.mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	if err != nil {
		_ = unix.Munmap(s.mem)
	}
	s.mem = nil
}
