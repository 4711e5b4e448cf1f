//go:build mpi

package mpi

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	workerEnv = "XLADDP_MPI_TEST_WORKER"
	// levelEnv is the thread level a worker asks for.
	levelEnv = "XLADDP_MPI_TEST_THREADS"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		failures := worker()
		out, _ := json.Marshal(failures)
		fmt.Println(string(out))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// value is rank r's element i of the test buffers: small integers, so
// every sum, product and average is exact in every dtype.
func value(r, i int) float64 { return float64((r+1)*(i%5+1)%7 - 2) }

func encode(d Datatype, vs []float64) []byte {
	b := make([]byte, len(vs)*d.Size())
	for i, v := range vs {
		switch d {
		case Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		case Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		case BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(v))>>16))
		case Int32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
		case Int64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
		}
	}
	return b
}

// worker runs every call on this rank and returns what went wrong.
func worker() (failures []string) {
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	required, err := ParseThreadLevel(os.Getenv(levelEnv))
	if err != nil {
		return []string{err.Error()}
	}
	provided, err := Init(required)
	if err != nil {
		return []string{err.Error()}
	}
	if provided != required {
		fail("asked for %v, MPI provided %v", required, provided)
	}
	if direct != (provided == ThreadMultiple) {
		fail("at %v, calls run on the caller's thread: %v", provided, direct)
	}
	if !nilDereferencePanics() {
		fail("a nil dereference after MPI_Init did not become a Go panic")
	}
	defer Finalize()
	comm, err := World().Dup()
	if err != nil {
		return []string{err.Error()}
	}
	defer comm.Free()
	rank, _ := comm.Rank()
	size, _ := comm.Size()
	const n = 37
	for _, d := range []Datatype{Float32, Float64, BFloat16, Int32, Int64} {
		mine := make([]float64, n)
		for i := range mine {
			mine[i] = value(rank, i)
		}
		for _, op := range []Op{Sum, Min, Max, Prod} {
			want := make([]float64, n)
			for i := range want {
				acc := value(0, i)
				for r := 1; r < size; r++ {
					v := value(r, i)
					switch op {
					case Sum:
						acc += v
					case Min:
						acc = min(acc, v)
					case Max:
						acc = max(acc, v)
					case Prod:
						acc *= v
					}
				}
				want[i] = acc
			}
			for _, async := range []bool{false, true} {
				buf := encode(d, mine)
				if async {
					req, err := comm.Iallreduce(buf, d, op)
					if err == nil {
						err = req.Wait()
					}
					if err != nil {
						fail("Iallreduce %v %v: %v", d, op, err)
					}
				} else if err := comm.Allreduce(buf, d, op); err != nil {
					fail("Allreduce %v %v: %v", d, op, err)
				}
				if !slices.Equal(buf, encode(d, want)) {
					fail("allreduce %v op %v async %v: wrong result", d, op, async)
				}
			}
		}
		// Broadcast from the last rank.
		buf := encode(d, mine)
		if err := comm.Bcast(buf, d, size-1); err != nil || !slices.Equal(buf, encode(d, valuesOf(size-1, n))) {
			fail("Bcast %v: %v", d, err)
		}
		// Allgather, Gather to 0, Scatter from 0, ReduceScatterBlock.
		all := make([]byte, size*len(buf))
		var wantAll []byte
		for r := range size {
			wantAll = append(wantAll, encode(d, valuesOf(r, n))...)
		}
		req, err := comm.Iallgather(all, encode(d, mine), d)
		if err == nil {
			err = req.Wait()
		}
		if err != nil || !slices.Equal(all, wantAll) {
			fail("Iallgather %v: %v", d, err)
		}
		gathered := make([]byte, size*len(buf))
		if err := comm.Gather(gathered, encode(d, mine), d, 0); err != nil || (rank == 0 && !slices.Equal(gathered, wantAll)) {
			fail("Gather %v: %v", d, err)
		}
		part := make([]byte, len(buf))
		if err := comm.Scatter(part, wantAll, d, 0); err != nil || !slices.Equal(part, encode(d, mine)) {
			fail("Scatter %v: %v", d, err)
		}
		block := make([]byte, len(buf))
		if err := comm.ReduceScatterBlock(block, wantAll, d, Sum); err != nil || !slices.Equal(block, encode(d, scaled(valuesOf(rank, n), size))) {
			fail("ReduceScatterBlock %v: %v", d, err)
		}
	}
	// Alltoallv: rank r sends r+1+dst elements to dst.
	d := Int32
	var in []float64
	var inCounts, outCounts []int
	for dst := range size {
		inCounts = append(inCounts, rank+1+dst)
		for k := range rank + 1 + dst {
			in = append(in, float64(100*rank+10*dst+k))
		}
	}
	var want []float64
	for src := range size {
		outCounts = append(outCounts, src+1+rank)
		for k := range src + 1 + rank {
			want = append(want, float64(100*src+10*rank+k))
		}
	}
	out := make([]byte, len(want)*4)
	req, err := comm.Ialltoallv(out, encode(d, in), d, outCounts, inCounts)
	if err == nil {
		err = req.Wait()
	}
	if err != nil || !slices.Equal(out, encode(d, want)) {
		fail("Ialltoallv: %v", err)
	}
	// Point to point around a ring, tagged; then a message shorter than
	// the buffer, and a bad root: errors with MPI's text.
	if size > 1 {
		next, prev := (rank+1)%size, (rank+size-1)%size
		sreq, err := comm.Isend(encode(Float64, []float64{float64(rank)}), Float64, next, 7)
		if err != nil {
			fail("Isend: %v", err)
		}
		got := make([]byte, 8)
		if err := comm.Recv(got, Float64, prev, 7); err != nil || !slices.Equal(got, encode(Float64, []float64{float64(prev)})) {
			fail("Recv: %v", err)
		}
		if err := sreq.Wait(); err != nil {
			fail("Isend wait: %v", err)
		}
		if rank == 0 {
			if err := comm.Send(make([]byte, 8), Float64, 1, 9); err != nil {
				fail("short Send: %v", err)
			}
		}
		if rank == 1 {
			err := comm.Recv(make([]byte, 16), Float64, 0, 9)
			if err == nil || !strings.Contains(err.Error(), "received 1 elements, want 2") {
				fail("short message: %v", err)
			}
		}
	}
	if err := comm.Bcast(make([]byte, 4), Int32, size+3); err == nil || !strings.Contains(err.Error(), "MPI_Bcast: MPI_ERR_ROOT") {
		fail("bad root: %v", err)
	}
	// Empty buffers are valid everywhere; a partial element is refused
	// before MPI sees it.
	if err := comm.Allreduce(nil, Float32, Sum); err != nil {
		fail("empty Allreduce: %v", err)
	}
	if err := comm.Allgather(nil, nil, Int64); err != nil {
		fail("empty Allgather: %v", err)
	}
	if err := comm.Allreduce(make([]byte, 6), Float32, Sum); err != errBadCount {
		fail("partial element: %v", err)
	}
	// Calls made at every stack depth of fresh goroutines, so the
	// runtime grows (copies) the stack inside the binding's frames: no
	// frame may hold a value it takes for a bad pointer (MPI_IN_PLACE is
	// (void *)1).
	for depth := range 300 {
		done := make(chan error)
		go func() { done <- atDepth(depth, func() error { return comm.Allreduce(make([]byte, 4), Int32, Sum) }) }()
		if err := <-done; err != nil {
			fail("Allreduce at stack depth %d: %v", depth, err)
		}
	}
	// A receive nothing matches ends when cancelled.
	req, err = comm.Irecv(make([]byte, 8), Int64, (rank+1)%size, 99)
	if err == nil {
		err = req.Cancel()
	}
	if err != nil {
		fail("Irecv then Cancel: %v", err)
	}
	if err := comm.Barrier(); err != nil {
		fail("Barrier: %v", err)
	}
	return failures
}

// atDepth calls f under depth extra stack frames.
func atDepth(depth int, f func() error) error {
	var pad [16]int64
	pad[depth%16] = int64(depth)
	if depth == 0 {
		return f()
	}
	err := atDepth(depth-1, f)
	if pad[depth%16] != int64(depth) {
		return fmt.Errorf("frame at depth %d overwritten", depth)
	}
	return err
}

// nilDereferencePanics reports whether Go still turns a SIGSEGV into a
// panic (Open MPI would take the signal for its own backtrace).
func nilDereferencePanics() (panicked bool) {
	defer func() { panicked = recover() != nil }()
	var p *int
	return *p == 0
}

func valuesOf(r, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = value(r, i)
	}
	return out
}

// scaled is the sum over size ranks of rank-block copies: every rank sent
// the same wantAll, so block r is size times rank r's values.
func scaled(vs []float64, size int) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = v * float64(size)
	}
	return out
}

// TestBindingUnderMpirun runs every call of the binding in 1 to 4 ranks
// under mpirun, each rank checking results against values it computes
// itself, for every dtype and reduction, blocking and nonblocking; and in
// 3 ranks at the lower thread levels, where every call is handed to MPI's
// main thread.
func TestBindingUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	require.NoError(t, err, "the mpi build needs Open MPI's mpirun (make deps installs it)")
	for _, tc := range []struct {
		np     int
		thread string
	}{{1, "multiple"}, {2, "multiple"}, {3, "multiple"}, {4, "multiple"}, {3, "serialized"}, {3, "funneled"}} {
		np := tc.np
		t.Run(fmt.Sprintf("np %d %s", np, tc.thread), func(t *testing.T) {
			cmd := exec.Command(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(np), os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), workerEnv+"=1", levelEnv+"="+tc.thread)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			lines := 0
			for _, line := range strings.Split(string(out), "\n") {
				var failures []string
				if json.Unmarshal([]byte(line), &failures) == nil {
					lines++
					assert.Empty(t, failures)
				}
			}
			assert.Equal(t, np, lines, "every rank reports: %s", out)
		})
	}
}
