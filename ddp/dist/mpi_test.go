//go:build mpi

package dist

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/mpiengine"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/workertest"
	"github.com/xladdp/xladdp/ddp/mpi"
)

func init() {
	scenarios["mpi-chunked"] = chunkedScenario
	scenarios["mpi-destroy-in-flight"] = mpiDestroyInFlightScenario
	groupScenarios["mpi-errors"] = mpiErrorsScenario
	groupScenarios["mpi-two-groups"] = twoGroupsScenario
}

// mpirunJob starts np ranks of scenario on the mpi backend under mpirun
// (workertest.MPIRun), for at most 3 minutes.
func mpirunJob(t *testing.T, scenario string, np int, started func(dir string), env ...string) workertest.MPIResult {
	t.Helper()
	return workertest.MPIRun(t, 3*time.Minute, scenario, np, started, env...)
}

var (
	mpirunJobWithin = workertest.MPIRun
	requireClean    = workertest.RequireClean
)

// TestMPICollectives runs the TCP transport's collective suite
// (collectivesScenario: every collective, dtype and reduce op, blocking
// and async, against float64 references) on the mpi backend in 1 to 4
// ranks under mpirun, and at the serialized thread level, where every
// MPI call goes through MPI's main thread. All-reduce results must be
// bitwise equal on every rank.
func TestMPICollectives(t *testing.T) {
	for _, tc := range []struct {
		np      int
		threads string
	}{{1, "multiple"}, {2, "multiple"}, {3, "multiple"}, {4, "multiple"}, {3, "serialized"}} {
		t.Run(fmt.Sprintf("np %d %s", tc.np, tc.threads), func(t *testing.T) {
			res := mpirunJob(t, "collectives", tc.np, nil, "XLADDP_TEST_TIMEOUT=60s", EnvMPIThreads+"="+tc.threads)
			requireClean(t, res)
			for r, rep := range res.Reps {
				assert.Equal(t, TransportMPI, rep.Transport, "rank %d", r)
				assert.Equal(t, res.Reps[0].Hashes, rep.Hashes, "rank %d's results differ from rank 0's", r)
			}
			require.NotEmpty(t, res.Reps[0].Hashes)
		})
	}
}

// chunkedScenario: empty buffers on every collective; then all-reduces
// and broadcasts larger than one MPI call (the chunk made small) are split
// into several, blocking and async.
func chunkedScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	empty := Float64s(nil)
	for i, err := range []error{
		g.AllReduce(ctx, empty, Avg), g.AllReduceAsync(empty, Max).Wait(ctx), g.Broadcast(ctx, empty, 0),
		g.AllGather(ctx, empty, empty), g.ReduceScatter(ctx, empty, empty, Sum), g.AllToAllSingle(ctx, empty, empty, nil, nil),
		g.Gather(ctx, empty, empty, 0), g.Scatter(ctx, empty, empty, 0),
	} {
		if err != nil {
			rep.Failures = append(rep.Failures, fmt.Sprintf("empty collective %d: %v", i, err))
		}
	}
	mpiengine.SetChunkElements(1000)
	const n = 2501
	for i, async := range []bool{false, true} {
		seed := uint64(90 + i)
		_, buf := values(Float32, Sum, n, g.Rank(), seed)
		var err error
		if async {
			err = g.AllReduceAsync(buf, Sum).Wait(ctx)
		} else {
			err = g.AllReduce(ctx, buf, Sum)
		}
		if err != nil {
			rep.Error = err.Error()
			return
		}
		want, mag := referenceReduce(Float32, Sum, g.WorldSize(), n, seed)
		check(rep, fmt.Sprintf("chunked AllReduce async=%v", async), buf, want, mag, Float32, Sum)
		v, root := values(Int64, Sum, n, g.WorldSize()-1, seed)
		_, mine := values(Int64, Sum, n, g.Rank(), seed)
		if g.Rank() != g.WorldSize()-1 {
			root = mine
		}
		if async {
			err = g.BroadcastAsync(root, g.WorldSize()-1).Wait(ctx)
		} else {
			err = g.Broadcast(ctx, root, g.WorldSize()-1)
		}
		if err != nil {
			rep.Error = err.Error()
			return
		}
		check(rep, fmt.Sprintf("chunked Broadcast async=%v", async), root, v, make([]float64, n), Int64, Sum)
	}
}

// TestMPIChunkedOperations: empty buffers work on every collective, and
// buffers past MPI's int counts are split into several MPI calls (here
// past a chunk of 1000 elements).
func TestMPIChunkedOperations(t *testing.T) {
	res := mpirunJob(t, "mpi-chunked", 3, nil, "XLADDP_TEST_TIMEOUT=60s")
	requireClean(t, res)
}

// mpiErrorsScenario: errors MPI returns, and ours before MPI sees a call,
// each on a group of its own (an error breaks its group), all open
// together since destroying the last group finalizes MPI. Rank 1 records
// the outcome of each case in rep.Errors.
func mpiErrorsScenario(rep *report) {
	ctx := context.Background()
	var groups []*ProcessGroup
	defer func() {
		for _, g := range groups {
			if err := g.Destroy(); err != nil && rep.Error == "" {
				rep.Error = "Destroy: " + err.Error()
			}
		}
	}()
	group := func() *ProcessGroup {
		g, err := InitProcessGroup(ctx, workerOptions())
		if err != nil {
			rep.Error = err.Error()
			return nil
		}
		groups = append(groups, g)
		return g
	}
	// A message longer than the receiving buffer: MPI_ERR_TRUNCATE; the
	// group is broken afterwards.
	g := group()
	if g == nil {
		return
	}
	switch g.Rank() {
	case 0:
		_ = g.Send(ctx, Int32s(make([]int32, 4)), 1, 5)
	case 1:
		err := g.Recv(ctx, Int32s(make([]int32, 2)), 0, 5)
		rep.Errors = append(rep.Errors, fmt.Sprint(err))
		rep.Errors = append(rep.Errors, fmt.Sprint(g.AllReduce(ctx, Int32s(make([]int32, 1)), Sum)))
	}
	// A tag MPI cannot carry.
	g = group()
	if g == nil {
		return
	}
	if g.Rank() == 1 {
		rep.Errors = append(rep.Errors, fmt.Sprint(g.Send(ctx, Int32s(make([]int32, 1)), 0, 1<<31)))
	}
	// A message shorter than the receiving buffer.
	g = group()
	if g == nil {
		return
	}
	switch g.Rank() {
	case 0:
		_ = g.Send(ctx, Float64s(make([]float64, 1)), 1, 7)
	case 1:
		rep.Errors = append(rep.Errors, fmt.Sprint(g.Recv(ctx, Float64s(make([]float64, 3)), 0, 7)))
	}
	// A healthy group after all that, and a destroyed one.
	g = group()
	if g == nil {
		return
	}
	x := []int64{1}
	rep.Errors = append(rep.Errors, fmt.Sprint(g.AllReduce(ctx, Int64s(x), Sum)), strconv.FormatInt(x[0], 10))
	last := group()
	if last == nil {
		return
	}
	groups = groups[:len(groups)-1]
	if err := last.Destroy(); err != nil {
		rep.Error = err.Error()
	}
	rep.Errors = append(rep.Errors, fmt.Sprint(last.AllReduce(ctx, Int64s(x), Sum)), fmt.Sprint(last.BarrierAsync().Wait(ctx)))
}

// twoGroupsScenario: two groups, each driven by its own goroutine at the
// same time, all-reduce 300 times each: concurrent MPI calls on two
// communicators (MPI_THREAD_MULTIPLE), each group's results its own.
func twoGroupsScenario(rep *report) {
	ctx := context.Background()
	var groups [2]*ProcessGroup
	for i := range groups {
		g, err := InitProcessGroup(ctx, workerOptions())
		if err != nil {
			rep.Error = err.Error()
			return
		}
		defer g.Destroy()
		groups[i] = g
	}
	errs := make(chan error, 2)
	for i, g := range groups {
		go func() {
			for step := range 300 {
				x := []int64{int64(1000*i + step + g.Rank())}
				var err error
				if step%3 == 0 {
					err = g.AllReduceAsync(Int64s(x), Sum).Wait(ctx)
				} else {
					err = g.AllReduce(ctx, Int64s(x), Sum)
				}
				n := int64(g.WorldSize())
				if want := n*int64(1000*i+step) + n*(n-1)/2; err == nil && x[0] != want {
					err = fmt.Errorf("group %d step %d: %d, want %d", i, step, x[0], want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range groups {
		if err := <-errs; err != nil {
			rep.Failures = append(rep.Failures, err.Error())
		}
	}
}

// TestMPITwoGroupsConcurrently: groups are independent communicators, safe
// to drive from different goroutines at once.
func TestMPITwoGroupsConcurrently(t *testing.T) {
	res := mpirunJob(t, "mpi-two-groups", 3, nil, "XLADDP_TEST_TIMEOUT=60s")
	requireClean(t, res)
}

// TestMPIErrorsAreGoErrors: what MPI refuses comes back as a Go error
// with MPI's own text and the operation named; the group that failed
// refuses what follows; other groups carry on.
func TestMPIErrorsAreGoErrors(t *testing.T) {
	res := mpirunJob(t, "mpi-errors", 2, nil, "XLADDP_TEST_TIMEOUT=20s")
	require.NoError(t, res.Err, "%s", res.Output)
	require.NotNil(t, res.Reps[1], res.Output)
	rep := res.Reps[1]
	require.Empty(t, rep.Error)
	require.Len(t, rep.Errors, 8, "%q", rep.Errors)
	assert.Contains(t, rep.Errors[0], "Recv (point-to-point #1) on rank 1: MPI_Irecv")
	assert.Contains(t, rep.Errors[0], "MPI_ERR_TRUNCATE")
	assert.Contains(t, rep.Errors[1], "MPI_ERR_TRUNCATE", "the broken group refuses the next call with its cause")
	assert.Contains(t, rep.Errors[2], "tag 2147483648 is above this MPI's largest tag, MPI_TAG_UB = 2147483647")
	assert.Contains(t, rep.Errors[3], "received 1 elements, want 3")
	assert.Equal(t, []string{"<nil>", "2"}, rep.Errors[4:6])
	assert.Equal(t, []string{ErrGroupClosed.Error(), ErrGroupClosed.Error()}, rep.Errors[6:], "a destroyed group refuses work")
}

// mpiDestroyInFlightScenario: rank 0 starts an all-reduce and destroys the
// group at once; rank 1 joins a second later. Destroy waits for the
// operation, which completes.
func mpiDestroyInFlightScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	x := []int64{int64(g.Rank() + 1)}
	if g.Rank() == 1 {
		time.Sleep(time.Second)
		rep.Errors = append(rep.Errors, fmt.Sprint(g.AllReduce(ctx, Int64s(x), Sum)))
		return
	}
	w := g.AllReduceAsync(Int64s(x), Sum)
	rep.Errors = append(rep.Errors, fmt.Sprint(g.Destroy()), fmt.Sprint(w.Wait(ctx)), strconv.FormatInt(x[0], 10))
}

// TestMPIDestroyWithOperationInFlight: Destroy lets a started collective
// finish rather than pull the buffer from under MPI.
func TestMPIDestroyWithOperationInFlight(t *testing.T) {
	res := mpirunJob(t, "mpi-destroy-in-flight", 2, nil, "XLADDP_TEST_TIMEOUT=20s")
	require.NoError(t, res.Err, "%s", res.Output)
	require.NotNil(t, res.Reps[0], res.Output)
	assert.Equal(t, []string{"<nil>", "<nil>", "3"}, res.Reps[0].Errors)
	assert.Equal(t, []string{"<nil>"}, res.Reps[1].Errors)
}

// TestMPIWorldDisagreesWithEnvironment: a process started without mpirun
// (an MPI singleton) but told WORLD_SIZE=2, as ddprun or Spawn would, is
// refused with what to do, not left waiting for a peer MPI never had.
func TestMPIWorldDisagreesWithEnvironment(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=basic", EnvTransport+"=mpi", EnvRank+"=0", EnvWorldSize+"=2",
		EnvMasterAddr+"=127.0.0.1", EnvMasterPort+"=1")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var rep report
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep))
	assert.Contains(t, rep.Error, "WORLD_SIZE=2, but mpirun made this process rank 0 of 1: the mpi backend takes its ranks from mpirun")
}

// BenchmarkMPIAllReduceOverhead: a 4 KiB all-reduce in a one-rank MPI job
// (a singleton: no mpirun needed), through the group and through the
// binding directly; the difference is what the group adds per call.
func BenchmarkMPIAllReduceOverhead(b *testing.B) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		b.Skip("runs as an MPI singleton, not under mpirun")
	}
	b.Setenv(EnvRank, "")
	b.Setenv(EnvWorldSize, "")
	o := NewOptions()
	o.Transport = TransportMPI
	g, err := InitProcessGroup(b.Context(), o)
	require.NoError(b, err)
	defer g.Destroy()
	buf := Float32s(make([]float32, 1024))
	b.Run("group", func(b *testing.B) {
		for b.Loop() {
			if err := g.AllReduce(b.Context(), buf, Sum); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The binding alone, on a communicator of the same job.
	comm, err := mpi.World().Dup()
	require.NoError(b, err)
	defer comm.Free()
	b.Run("binding", func(b *testing.B) {
		for b.Loop() {
			if err := comm.Allreduce(buf.Bytes(), mpi.Float32, mpi.Sum); err != nil {
				b.Fatal(err)
			}
		}
	})
}
