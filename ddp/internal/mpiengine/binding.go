//go:build mpi

package mpiengine

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/ddp/mpi"
	"github.com/xladdp/xladdp/reduce"
)

// EnvMPIThreads is the thread level the mpi backend asks MPI for:
// multiple (the default), serialized or funneled. Below multiple every
// MPI call is handed to one goroutine locked to MPI's main thread; some
// fabrics run faster that way.
const EnvMPIThreads = "XLADDP_MPI_THREADS"

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
	rank, size    int
	tagUB         int
	// rankOrder: floating-point sums go in rank order (EnvMPIReduceOrder).
	rankOrder bool
	// leaves[r] is the receive of peer r's departure notice: the last
	// collective it ran (nil for this rank, and once reported).
	leaves     []*mpi.Request
	leaveSeqs  [][]int64
	reportedMu sync.Mutex
}

// leaveTag tags departure notices on the control communicator.
const leaveTag = 1

func newMPIEngine(o transport.Config) (engine, engineWorld, error) {
	required, err := mpi.ParseThreadLevel(os.Getenv(EnvMPIThreads))
	if err != nil {
		return nil, engineWorld{}, fmt.Errorf("ddp: $%s: %w", EnvMPIThreads, err)
	}
	rankOrder, err := parseReduceOrder()
	if err != nil {
		return nil, engineWorld{}, err
	}
	mpiGroupsMu.Lock()
	defer mpiGroupsMu.Unlock()
	if _, err := mpi.Init(required); err != nil {
		return nil, engineWorld{}, fmt.Errorf("ddp: backend mpi: %w", err)
	}
	e := &mpiEngine{rankOrder: rankOrder}
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
		e.rank, e.size = w.rank, w.size
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
		req, err := e.control.Irecv(transport.Int64s(e.leaveSeqs[r]).Bytes(), mpi.Int64, r, leaveTag)
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
			if req, err := e.control.Isend(transport.Int64s(mine).Bytes(), mpi.Int64, r, leaveTag); err == nil {
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

// mpiDatatypes and mpiOps are indexed by the group's (checked) values: arrays,
// not maps, on the per-call path.
var mpiDatatypes = [...]mpi.Datatype{transport.Float32: mpi.Float32, transport.Float64: mpi.Float64, transport.BFloat16: mpi.BFloat16,
	transport.Int32: mpi.Int32, transport.Int64: mpi.Int64}

// mpiOps: Avg is reduced as a sum, which the group divides.
var mpiOps = [...]mpi.Op{reduce.Sum: mpi.Sum, reduce.Avg: mpi.Sum, reduce.Min: mpi.Min, reduce.Max: mpi.Max, reduce.Product: mpi.Prod}

var mpiCallNames = map[transport.Kind]string{transport.AllReduce: "Allreduce", transport.Broadcast: "Bcast", transport.AllGather: "Allgather",
	transport.ReduceScatter: "Reduce_scatter_block", transport.AllToAll: "Alltoallv", transport.Gather: "Gather", transport.Scatter: "Scatter",
	transport.Barrier: "Barrier", transport.Send: "Send", transport.Recv: "Recv"}

func (e *mpiEngine) callName(kind transport.Kind, async bool) string {
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

// SetChunkElements makes every later all-reduce or broadcast split into
// MPI calls of at most n elements: a test's way to reach the chunked
// path without buffers past 2^31 elements.
func SetChunkElements(n int) { mpiChunkElements = n }

// tooLarge explains a buffer past MPI's int counts for an operation that
// cannot be split into independent calls.
func tooLarge(c transport.Call, elements int) error {
	return fmt.Errorf("%d elements per rank is more than MPI's int counts allow (%d) for %s: split it into several calls",
		elements, mpi.MaxCount, c.Describe())
}

// chunks calls f on buf's pieces of at most mpiChunkElements elements
// (once for an empty buffer).
func chunks(buf transport.Buffer, f func(transport.Buffer) error) error {
	n := buf.Len()
	if n <= mpiChunkElements {
		return f(buf)
	}
	for lo := 0; lo < n; lo += mpiChunkElements {
		if err := f(buf.Slice(lo, min(lo+mpiChunkElements, n))); err != nil {
			return err
		}
	}
	return nil
}

func (e *mpiEngine) run(c transport.Call) error {
	switch c.Kind {
	case transport.AllReduce:
		if e.inRankOrder(c, c.Buf.DType) {
			return e.allReduceInRankOrder(c.Buf)
		}
		if c.Buf.Len() <= mpiChunkElements { // without the closure chunks takes
			return e.comm.Allreduce(c.Buf.Bytes(), mpiDatatypes[c.Buf.DType], mpiOps[c.Op])
		}
		return chunks(c.Buf, func(b transport.Buffer) error {
			return e.comm.Allreduce(b.Bytes(), mpiDatatypes[b.DType], mpiOps[c.Op])
		})
	case transport.Broadcast:
		return chunks(c.Buf, func(b transport.Buffer) error { return e.comm.Bcast(b.Bytes(), mpiDatatypes[b.DType], c.Root) })
	case transport.Barrier:
		return e.comm.Barrier()
	}
	if err := e.checkCounts(c); err != nil {
		return err
	}
	switch c.Kind {
	case transport.AllGather:
		return e.comm.Allgather(c.Out.Bytes(), c.In.Bytes(), mpiDatatypes[c.In.DType])
	case transport.ReduceScatter:
		if e.inRankOrder(c, c.In.DType) {
			return e.reduceScatterInRankOrder(c.Out, c.In)
		}
		return e.comm.ReduceScatterBlock(c.Out.Bytes(), c.In.Bytes(), mpiDatatypes[c.In.DType], mpiOps[c.Op])
	case transport.AllToAll:
		return e.comm.Alltoallv(c.Out.Bytes(), c.In.Bytes(), mpiDatatypes[c.In.DType], c.OutSplits, c.InSplits)
	case transport.Gather:
		return e.comm.Gather(c.Out.Bytes(), c.In.Bytes(), mpiDatatypes[c.In.DType], c.Root)
	case transport.Scatter:
		return e.comm.Scatter(c.Out.Bytes(), c.In.Bytes(), mpiDatatypes[c.Out.DType], c.Root)
	}
	return fmt.Errorf("ddp: backend mpi has no blocking %s", c.Describe())
}

// checkCounts refuses an operation whose counts or displacements do not
// fit MPI's ints, and a tag above MPI_TAG_UB.
func (e *mpiEngine) checkCounts(c transport.Call) error {
	if n := max(c.Buf.Len(), c.In.Len(), c.Out.Len()); n > mpi.MaxCount {
		return tooLarge(c, n)
	}
	if (c.Kind == transport.Send || c.Kind == transport.Recv) && int64(c.Tag) > int64(e.tagUB) {
		return fmt.Errorf("tag %d is above this MPI's largest tag, MPI_TAG_UB = %d", c.Tag, e.tagUB)
	}
	return nil
}

// mpiRequest is a started Send or Recv.
type mpiRequest struct{ r *mpi.Request }

func (m mpiRequest) test() (bool, error) { return m.r.Test() }

// start begins a Send or Recv (collectives run blocking: see engineState).
func (e *mpiEngine) start(c transport.Call) (engineRequest, error) {
	if err := e.checkCounts(c); err != nil {
		return nil, err
	}
	var r *mpi.Request
	var err error
	switch c.Kind {
	case transport.Send:
		r, err = e.comm.Isend(c.Buf.Bytes(), mpiDatatypes[c.Buf.DType], c.Root, int(c.Tag))
	case transport.Recv:
		r, err = e.comm.Irecv(c.Buf.Bytes(), mpiDatatypes[c.Buf.DType], c.Root, int(c.Tag))
	default:
		return nil, fmt.Errorf("ddp: backend mpi starts only point-to-point operations, not %s", c.Describe())
	}
	if err != nil {
		return nil, err
	}
	return mpiRequest{r}, nil
}
