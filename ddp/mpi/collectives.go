//go:build mpi

package mpi

/*
#include <mpi.h>
#include <stdlib.h>
// MPI_IN_PLACE is (void *)1 in Open MPI: never let Go hold it, since the
// runtime rejects a pointer-typed value that small on a stack it copies.
static int xw_allreduce_in_place(void *buf, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, d, op, c);
}
static int xw_iallreduce_in_place(void *buf, int n, MPI_Datatype d, MPI_Op op, MPI_Comm c, MPI_Request *r) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, d, op, c, r);
}
static MPI_Request xw_request_null2(void) { return MPI_REQUEST_NULL; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Request is a nonblocking operation. The buffers it was given stay
// pinned and must not be touched until Test reports it done or Wait
// returns.
type Request struct {
	call string
	// req lives in C memory: MPI writes it, and a Go struct holding
	// pointers (the pinner) may not be handed to C.
	req    *C.MPI_Request
	pinner runtime.Pinner
	// cArrays are C copies of count arrays MPI reads until completion.
	cArrays []unsafe.Pointer
	done    bool
	err     error
	// recv is set on a receive: the message must fill its buffer.
	recv *recvCheck
}

// recvCheck is what a completed receive is checked against.
type recvCheck struct {
	count C.int
	d     Datatype
}

// checkStatus fails a receive whose message was shorter than its buffer
// (MPI reports a longer one itself, as MPI_ERR_TRUNCATE).
func (rc *recvCheck) checkStatus(call string, st *C.MPI_Status) error {
	if rc == nil {
		return nil
	}
	var got C.int
	if err := check("MPI_Get_count", C.MPI_Get_count(st, rc.d.mpi(), &got)); err != nil {
		return err
	}
	if got != rc.count {
		return &Error{Call: call, Code: -1, Text: fmt.Sprintf("received %d elements, want %d (the sender's buffer has another length)", got, rc.count)}
	}
	return nil
}

func (c Comm) start(call string, pin [][]byte, start func(*C.MPI_Request) C.int) (*Request, error) {
	r := &Request{call: call, req: (*C.MPI_Request)(C.malloc(C.sizeof_MPI_Request))}
	*r.req = C.xw_request_null2()
	for _, b := range pin {
		if len(b) > 0 {
			r.pinner.Pin(&b[0])
		}
	}
	if err := do(call, func() C.int { return start(r.req) }); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

func (r *Request) release() {
	r.pinner.Unpin()
	C.free(unsafe.Pointer(r.req))
	r.req = nil
	for _, p := range r.cArrays {
		C.free(p)
	}
	r.cArrays = nil
}

// Test is MPI_Test: whether the operation finished (and its error).
func (r *Request) Test() (bool, error) {
	if r.done {
		return true, r.err
	}
	var flag C.int
	var st C.MPI_Status
	if err := do(r.call+" (MPI_Test)", func() C.int { return C.MPI_Test(r.req, &flag, &st) }); err != nil {
		r.done, r.err = true, err
		r.release()
		return true, err
	}
	if flag != 0 {
		r.done = true
		r.err = r.recv.checkStatus(r.call, &st)
		r.release()
	}
	return r.done, r.err
}

// Wait is MPI_Wait.
func (r *Request) Wait() error {
	if r.done {
		return r.err
	}
	r.done = true
	var st C.MPI_Status
	if r.err = do(r.call+" (MPI_Wait)", func() C.int { return C.MPI_Wait(r.req, &st) }); r.err == nil {
		r.err = r.recv.checkStatus(r.call, &st)
	}
	r.release()
	return r.err
}

// Cancel is MPI_Cancel then MPI_Wait: a receive that has not matched a
// message ends without one; anything else finishes as Wait would.
func (r *Request) Cancel() error {
	if r.done {
		return r.err
	}
	if err := do(r.call+" (MPI_Cancel)", func() C.int { return C.MPI_Cancel(r.req) }); err != nil {
		return err
	}
	r.done = true
	var st C.MPI_Status
	var cancelled C.int
	if r.err = do(r.call+" (MPI_Wait)", func() C.int { return C.MPI_Wait(r.req, &st) }); r.err == nil {
		C.MPI_Test_cancelled(&st, &cancelled)
		if cancelled == 0 {
			r.err = r.recv.checkStatus(r.call, &st)
		}
	}
	r.release()
	return r.err
}

// Allreduce reduces buf across the ranks in place (MPI_Allreduce with
// MPI_IN_PLACE).
func (c Comm) Allreduce(buf []byte, d Datatype, op Op) error {
	n, err := count(buf, d)
	if err != nil {
		return err
	}
	if direct { // the hot path, without do's closure
		return check("MPI_Allreduce", C.xw_allreduce_in_place(ptr(buf), n, d.mpi(), op.mpi(d), c.c))
	}
	return do("MPI_Allreduce", func() C.int { return C.xw_allreduce_in_place(ptr(buf), n, d.mpi(), op.mpi(d), c.c) })
}

// Iallreduce is Allreduce's nonblocking form.
func (c Comm) Iallreduce(buf []byte, d Datatype, op Op) (*Request, error) {
	n, err := count(buf, d)
	if err != nil {
		return nil, err
	}
	return c.start("MPI_Iallreduce", [][]byte{buf}, func(r *C.MPI_Request) C.int {
		return C.xw_iallreduce_in_place(ptr(buf), n, d.mpi(), op.mpi(d), c.c, r)
	})
}

// Bcast is MPI_Bcast of buf from root.
func (c Comm) Bcast(buf []byte, d Datatype, root int) error {
	n, err := count(buf, d)
	if err != nil {
		return err
	}
	return do("MPI_Bcast", func() C.int { return C.MPI_Bcast(ptr(buf), n, d.mpi(), C.int(root), c.c) })
}

// Allgather is MPI_Allgather: out holds every rank's in, in rank order.
func (c Comm) Allgather(out, in []byte, d Datatype) error {
	n, err := count(in, d)
	if err != nil {
		return err
	}
	return do("MPI_Allgather", func() C.int { return C.MPI_Allgather(ptr(in), n, d.mpi(), ptr(out), n, d.mpi(), c.c) })
}

// Iallgather is Allgather's nonblocking form.
func (c Comm) Iallgather(out, in []byte, d Datatype) (*Request, error) {
	n, err := count(in, d)
	if err != nil {
		return nil, err
	}
	return c.start("MPI_Iallgather", [][]byte{out, in}, func(r *C.MPI_Request) C.int {
		return C.MPI_Iallgather(ptr(in), n, d.mpi(), ptr(out), n, d.mpi(), c.c, r)
	})
}

// ReduceScatterBlock is MPI_Reduce_scatter_block: out gets this rank's
// block of the reduction of every rank's in.
func (c Comm) ReduceScatterBlock(out, in []byte, d Datatype, op Op) error {
	n, err := count(out, d)
	if err != nil {
		return err
	}
	return do("MPI_Reduce_scatter_block", func() C.int { return C.MPI_Reduce_scatter_block(ptr(in), ptr(out), n, d.mpi(), op.mpi(d), c.c) })
}

// cInts copies counts and their running displacements to C memory.
func cInts(counts []int) (cnt, displ *C.int) {
	n := max(len(counts), 1)
	cnt = (*C.int)(C.malloc(C.size_t(n) * C.sizeof_int))
	displ = (*C.int)(C.malloc(C.size_t(n) * C.sizeof_int))
	cs, ds := unsafe.Slice(cnt, n), unsafe.Slice(displ, n)
	at := 0
	for i, k := range counts {
		cs[i], ds[i] = C.int(k), C.int(at)
		at += k
	}
	return cnt, displ
}

// Alltoallv is MPI_Alltoallv with element counts: in's first inCounts[0]
// elements go to rank 0, and so on; out receives outCounts[r] from rank r,
// in rank order.
func (c Comm) Alltoallv(out, in []byte, d Datatype, outCounts, inCounts []int) error {
	sc, sd := cInts(inCounts)
	rc, rd := cInts(outCounts)
	defer func() {
		for _, p := range []*C.int{sc, sd, rc, rd} {
			C.free(unsafe.Pointer(p))
		}
	}()
	return do("MPI_Alltoallv", func() C.int { return C.MPI_Alltoallv(ptr(in), sc, sd, d.mpi(), ptr(out), rc, rd, d.mpi(), c.c) })
}

// Ialltoallv is Alltoallv's nonblocking form.
func (c Comm) Ialltoallv(out, in []byte, d Datatype, outCounts, inCounts []int) (*Request, error) {
	sc, sd := cInts(inCounts)
	rc, rd := cInts(outCounts)
	arrays := []unsafe.Pointer{unsafe.Pointer(sc), unsafe.Pointer(sd), unsafe.Pointer(rc), unsafe.Pointer(rd)}
	r, err := c.start("MPI_Ialltoallv", [][]byte{out, in}, func(r *C.MPI_Request) C.int {
		return C.MPI_Ialltoallv(ptr(in), sc, sd, d.mpi(), ptr(out), rc, rd, d.mpi(), c.c, r)
	})
	if err != nil {
		for _, p := range arrays {
			C.free(p)
		}
		return nil, err
	}
	r.cArrays = arrays
	return r, nil
}

// Gather is MPI_Gather to root: out (read on root only) holds every
// rank's in, in rank order.
func (c Comm) Gather(out, in []byte, d Datatype, root int) error {
	n, err := count(in, d)
	if err != nil {
		return err
	}
	return do("MPI_Gather", func() C.int { return C.MPI_Gather(ptr(in), n, d.mpi(), ptr(out), n, d.mpi(), C.int(root), c.c) })
}

// Scatter is MPI_Scatter from root: out gets this rank's block of root's
// in.
func (c Comm) Scatter(out, in []byte, d Datatype, root int) error {
	n, err := count(out, d)
	if err != nil {
		return err
	}
	return do("MPI_Scatter", func() C.int { return C.MPI_Scatter(ptr(in), n, d.mpi(), ptr(out), n, d.mpi(), C.int(root), c.c) })
}

// Barrier is MPI_Barrier.
func (c Comm) Barrier() error { return do("MPI_Barrier", func() C.int { return C.MPI_Barrier(c.c) }) }

// Send is MPI_Send of buf to dst with tag.
func (c Comm) Send(buf []byte, d Datatype, dst, tag int) error {
	n, err := count(buf, d)
	if err != nil {
		return err
	}
	return do("MPI_Send", func() C.int { return C.MPI_Send(ptr(buf), n, d.mpi(), C.int(dst), C.int(tag), c.c) })
}

// Isend is Send's nonblocking form.
func (c Comm) Isend(buf []byte, d Datatype, dst, tag int) (*Request, error) {
	n, err := count(buf, d)
	if err != nil {
		return nil, err
	}
	return c.start("MPI_Isend", [][]byte{buf}, func(r *C.MPI_Request) C.int {
		return C.MPI_Isend(ptr(buf), n, d.mpi(), C.int(dst), C.int(tag), c.c, r)
	})
}

// Recv is MPI_Recv into buf from src with tag; a message of another
// length is an error.
func (c Comm) Recv(buf []byte, d Datatype, src, tag int) error {
	n, err := count(buf, d)
	if err != nil {
		return err
	}
	var st C.MPI_Status
	if err := do("MPI_Recv", func() C.int { return C.MPI_Recv(ptr(buf), n, d.mpi(), C.int(src), C.int(tag), c.c, &st) }); err != nil {
		return err
	}
	return (&recvCheck{n, d}).checkStatus("MPI_Recv", &st)
}

// Irecv is Recv's nonblocking form.
func (c Comm) Irecv(buf []byte, d Datatype, src, tag int) (*Request, error) {
	n, err := count(buf, d)
	if err != nil {
		return nil, err
	}
	r, err := c.start("MPI_Irecv", [][]byte{buf}, func(r *C.MPI_Request) C.int {
		return C.MPI_Irecv(ptr(buf), n, d.mpi(), C.int(src), C.int(tag), c.c, r)
	})
	if err != nil {
		return nil, err
	}
	r.recv = &recvCheck{n, d}
	return r, nil
}
