//go:build mpi

package dist

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/mpi"
)

// EnvMPIThreads is the thread level the mpi backend asks MPI for:
// multiple (the default), serialized or funneled. Below multiple every
// MPI call is handed to one goroutine locked to MPI's main thread; some
// fabrics run faster that way.
const EnvMPIThreads = "XLADDP_MPI_THREADS"

func init() { newEngines[BackendMPI] = newMPIEngine }

// mpiGroups counts the open mpi groups: destroying the last finalizes MPI.
var (
	mpiGroupsMu sync.Mutex
	mpiGroups   int
)

// mpiEngine runs a group's operations on a communicator of its own (a
// duplicate of MPI_COMM_WORLD, so no other MPI code's messages mix in),
// and tells peers it leaves on a second one, control.
type mpiEngine struct {
	comm, control mpi.Comm
	rank          int
	tagUB         int
	// leaves[r] is the receive of peer r's departure notice: the last
	// collective it ran (nil for this rank, and once reported).
	leaves     []*mpi.Request
	leaveSeqs  [][]int64
	reportedMu sync.Mutex
}

// leaveTag tags departure notices on the control communicator.
const leaveTag = 1

func newMPIEngine(o Options) (engine, engineWorld, error) {
	required, err := mpi.ParseThreadLevel(os.Getenv(EnvMPIThreads))
	if err != nil {
		return nil, engineWorld{}, fmt.Errorf("ddp: $%s: %w", EnvMPIThreads, err)
	}
	mpiGroupsMu.Lock()
	defer mpiGroupsMu.Unlock()
	if _, err := mpi.Init(required); err != nil {
		return nil, engineWorld{}, fmt.Errorf("ddp: backend mpi: %w", err)
	}
	e := &mpiEngine{}
	var w engineWorld
	world := mpi.World()
	if e.comm, err = world.Dup(); err != nil {
		return nil, w, fmt.Errorf("ddp: backend mpi: %w", err)
	}
	if e.control, err = world.Dup(); err != nil {
		return nil, w, errors.Join(fmt.Errorf("ddp: backend mpi: %w", err), e.comm.Free())
	}
	local, err := e.comm.SplitShared(0)
	if err == nil {
		w.rank, err = e.comm.Rank()
	}
	if err == nil {
		w.size, err = e.comm.Size()
	}
	if err == nil {
		w.localRank, err = local.Rank()
	}
	if err == nil {
		w.localSize, err = local.Size()
	}
	if err == nil {
		err = local.Free()
	}
	if err == nil {
		e.tagUB, err = e.comm.TagUB()
	}
	if err == nil {
		err = checkEngineWorld(o, w, "mpirun")
	}
	if err == nil {
		e.rank = w.rank
		err = e.listenForLeaves(w.size)
	}
	if err != nil {
		return nil, w, errors.Join(fmt.Errorf("ddp: backend mpi: %w", err), e.release())
	}
	mpiGroups++
	return e, w, nil
}

func (e *mpiEngine) abort() { mpi.Abort(1) }

// listenForLeaves posts the receive of every peer's departure notice.
func (e *mpiEngine) listenForLeaves(size int) error {
	e.leaves = make([]*mpi.Request, size)
	e.leaveSeqs = make([][]int64, size)
	for r := range size {
		if r == e.rank {
			continue
		}
		e.leaveSeqs[r] = make([]int64, 1)
		req, err := e.control.Irecv(Int64s(e.leaveSeqs[r]).bytes, mpi.Int64, r, leaveTag)
		if err != nil {
			return err
		}
		e.leaves[r] = req
	}
	return nil
}

func (e *mpiEngine) departed() (int, uint64, bool) {
	e.reportedMu.Lock()
	defer e.reportedMu.Unlock()
	for r, req := range e.leaves {
		if req == nil {
			continue
		}
		if done, err := req.Test(); done {
			e.leaves[r] = nil
			if err == nil {
				return r, uint64(e.leaveSeqs[r][0]), true
			}
		}
	}
	return 0, 0, false
}

// leaveWait bounds how long the departure notices may take to go out.
const leaveWait = 5 * time.Second

func (e *mpiEngine) leave(lastSeq uint64) {
	mine := []int64{int64(lastSeq)}
	var sends []*mpi.Request
	for r := range e.leaves {
		if r != e.rank {
			if req, err := e.control.Isend(Int64s(mine).bytes, mpi.Int64, r, leaveTag); err == nil {
				sends = append(sends, req)
			}
		}
	}
	deadline := time.Now().Add(leaveWait)
	for _, req := range sends {
		for {
			done, _ := req.Test()
			if done {
				break
			}
			if time.Now().After(deadline) {
				// Finalize cannot wait for it; MPI delivers or drops it.
				_ = req.Cancel()
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func (e *mpiEngine) close() error {
	mpiGroupsMu.Lock()
	defer mpiGroupsMu.Unlock()
	mpiGroups--
	return e.release()
}

// release ends the receives of peers' departures that never came, frees
// the communicators, and finalizes MPI when no group is left
// (mpiGroupsMu held).
func (e *mpiEngine) release() error {
	var err error
	e.reportedMu.Lock()
	for r, req := range e.leaves {
		if req != nil {
			err = errors.Join(err, req.Cancel())
			e.leaves[r] = nil
		}
	}
	e.reportedMu.Unlock()
	err = errors.Join(err, e.comm.Free(), e.control.Free())
	if mpiGroups == 0 {
		err = errors.Join(err, mpi.Finalize())
	}
	return err
}

// mpiDatatypes and mpiOps are indexed by ddp's (checked) values: arrays,
// not maps, on the per-call path.
var mpiDatatypes = [...]mpi.Datatype{Float32: mpi.Float32, Float64: mpi.Float64, BFloat16: mpi.BFloat16,
	Int32: mpi.Int32, Int64: mpi.Int64}

// mpiOps: Avg is reduced as a sum, which the group divides.
var mpiOps = [...]mpi.Op{Sum: mpi.Sum, Avg: mpi.Sum, Min: mpi.Min, Max: mpi.Max, Product: mpi.Prod}

var mpiCallNames = map[opKind]string{opAllReduce: "Allreduce", opBroadcast: "Bcast", opAllGather: "Allgather",
	opReduceScatter: "Reduce_scatter_block", opAllToAll: "Alltoallv", opGather: "Gather", opScatter: "Scatter",
	opBarrier: "Barrier", opSend: "Send", opRecv: "Recv"}

func (e *mpiEngine) callName(kind opKind, async bool) string {
	if async {
		return "MPI_I" + lowerFirst(mpiCallNames[kind])
	}
	return "MPI_" + mpiCallNames[kind]
}

func lowerFirst(s string) string { return string(s[0]|0x20) + s[1:] }

// mpiChunkElements bounds the elements of one MPI call of an all-reduce
// or broadcast, which split huge buffers into several calls (MPI counts
// are C ints); a variable so tests can make it small.
var mpiChunkElements = mpi.MaxCount

// tooLarge explains a buffer past MPI's int counts for an operation that
// cannot be split into independent calls.
func tooLarge(c engineCall, elements int) error {
	return fmt.Errorf("%d elements per rank is more than MPI's int counts allow (%d) for %s: split it into several calls",
		elements, mpi.MaxCount, describe(&c))
}

// chunks calls f on buf's pieces of at most mpiChunkElements elements
// (once for an empty buffer).
func chunks(buf Buffer, f func(Buffer) error) error {
	n := buf.Len()
	if n <= mpiChunkElements {
		return f(buf)
	}
	for lo := 0; lo < n; lo += mpiChunkElements {
		if err := f(buf.slice(lo, min(lo+mpiChunkElements, n))); err != nil {
			return err
		}
	}
	return nil
}

func (e *mpiEngine) run(c engineCall) error {
	switch c.kind {
	case opAllReduce:
		if c.buf.Len() <= mpiChunkElements { // without the closure chunks takes
			return e.comm.Allreduce(c.buf.bytes, mpiDatatypes[c.buf.DType], mpiOps[c.op])
		}
		return chunks(c.buf, func(b Buffer) error { return e.comm.Allreduce(b.bytes, mpiDatatypes[b.DType], mpiOps[c.op]) })
	case opBroadcast:
		return chunks(c.buf, func(b Buffer) error { return e.comm.Bcast(b.bytes, mpiDatatypes[b.DType], c.root) })
	case opBarrier:
		return e.comm.Barrier()
	}
	if err := e.checkCounts(c); err != nil {
		return err
	}
	switch c.kind {
	case opAllGather:
		return e.comm.Allgather(c.out.bytes, c.in.bytes, mpiDatatypes[c.in.DType])
	case opReduceScatter:
		return e.comm.ReduceScatterBlock(c.out.bytes, c.in.bytes, mpiDatatypes[c.in.DType], mpiOps[c.op])
	case opAllToAll:
		return e.comm.Alltoallv(c.out.bytes, c.in.bytes, mpiDatatypes[c.in.DType], c.outSplits, c.inSplits)
	case opGather:
		return e.comm.Gather(c.out.bytes, c.in.bytes, mpiDatatypes[c.in.DType], c.root)
	case opScatter:
		return e.comm.Scatter(c.out.bytes, c.in.bytes, mpiDatatypes[c.out.DType], c.root)
	}
	return fmt.Errorf("ddp: backend mpi has no blocking %s", describe(&c))
}

// checkCounts refuses an operation whose counts or displacements do not
// fit MPI's ints, and a tag above MPI_TAG_UB.
func (e *mpiEngine) checkCounts(c engineCall) error {
	if n := max(c.buf.Len(), c.in.Len(), c.out.Len()); n > mpi.MaxCount {
		return tooLarge(c, n)
	}
	if (c.kind == opSend || c.kind == opRecv) && int64(c.tag) > int64(e.tagUB) {
		return fmt.Errorf("tag %d is above this MPI's largest tag, MPI_TAG_UB = %d", c.tag, e.tagUB)
	}
	return nil
}

// mpiRequest is a started Send or Recv.
type mpiRequest struct{ r *mpi.Request }

func (m mpiRequest) test() (bool, error) { return m.r.Test() }

// start begins a Send or Recv (collectives run blocking: see engineState).
func (e *mpiEngine) start(c engineCall) (engineRequest, error) {
	if err := e.checkCounts(c); err != nil {
		return nil, err
	}
	var r *mpi.Request
	var err error
	switch c.kind {
	case opSend:
		r, err = e.comm.Isend(c.buf.bytes, mpiDatatypes[c.buf.DType], c.root, int(c.tag))
	case opRecv:
		r, err = e.comm.Irecv(c.buf.bytes, mpiDatatypes[c.buf.DType], c.root, int(c.tag))
	default:
		return nil, fmt.Errorf("ddp: backend mpi starts only point-to-point operations, not %s", describe(&c))
	}
	if err != nil {
		return nil, err
	}
	return mpiRequest{r}, nil
}
