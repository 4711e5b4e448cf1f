package dist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/ddp/internal/tcp"
)

// groupScenarios run in a worker without the group runWorker makes.
var groupScenarios = map[string]func(rep *report){
	"mismatch-cases": mismatchCasesScenario,
	"default-group":  defaultGroupScenario,
}

func init() {
	scenarios["p2p-subsets"] = p2pSubsetsScenario
	scenarios["destroy-in-flight"] = destroyInFlightScenario
	scenarios["abandoned-wait"] = abandonedWaitScenario
}

func workerOptions() Options {
	o := NewOptions()
	if s := os.Getenv("XLADDP_TEST_TIMEOUT"); s != "" {
		o.Timeout, _ = time.ParseDuration(s)
	}
	return o
}

// mismatchCases are disagreements between rank 0 and the others, each on
// a fresh group (a mismatch breaks the group). XLADDP_DISTRIBUTED_DEBUG is off: the
// check every frame carries must catch them all.
var mismatchCases = []struct {
	name string
	// buffers returns rank's buffer and op.
	call func(ctx context.Context, g *ProcessGroup) error
}{
	{"length, direct path", func(ctx context.Context, g *ProcessGroup) error {
		return g.AllReduce(ctx, Float32s(make([]float32, 10+g.Rank())), Sum)
	}},
	{"length, ring or shared memory", func(ctx context.Context, g *ProcessGroup) error {
		return g.AllReduce(ctx, Float32s(make([]float32, 300_000+g.Rank())), Sum)
	}},
	{"length, shared buffers", func(ctx context.Context, g *ProcessGroup) error {
		b, err := g.SharedBuffer(Float32, 300_000+g.Rank())
		if err != nil {
			return err
		}
		return g.AllReduce(ctx, b, Sum)
	}},
	{"dtype with the same bytes", func(ctx context.Context, g *ProcessGroup) error {
		if g.Rank() == 0 {
			return g.AllReduce(ctx, Int32s(make([]int32, 300_000)), Sum)
		}
		return g.AllReduce(ctx, Float32s(make([]float32, 300_000)), Sum)
	}},
	{"dtype with the same bytes, small", func(ctx context.Context, g *ProcessGroup) error {
		if g.Rank() == 0 {
			return g.AllReduce(ctx, Int32s(make([]int32, 1000)), Sum)
		}
		return g.AllReduce(ctx, Float32s(make([]float32, 1000)), Sum)
	}},
	{"length across the small path's edge", func(ctx context.Context, g *ProcessGroup) error {
		if g.Rank() == 0 {
			return g.AllReduce(ctx, Float32s(make([]float32, 60_000)), Sum)
		}
		return g.AllReduce(ctx, Float32s(make([]float32, 70_000)), Sum)
	}},
	{"all-reduce against a broadcast", func(ctx context.Context, g *ProcessGroup) error {
		if g.Rank() == 0 {
			return g.AllReduce(ctx, Float32s(make([]float32, 100)), Sum)
		}
		return g.Broadcast(ctx, Float32s(make([]float32, 100)), 1)
	}},
	{"reduce op", func(ctx context.Context, g *ProcessGroup) error {
		op := Sum
		if g.Rank() == 0 {
			op = Max
		}
		return g.AllReduce(ctx, Float32s(make([]float32, 1000)), op)
	}},
	{"broadcast root", func(ctx context.Context, g *ProcessGroup) error {
		root := 0
		if g.Rank() == 1 {
			root = 1
		}
		return g.Broadcast(ctx, Float32s(make([]float32, 100)), root)
	}},
	{"scatter root", func(ctx context.Context, g *ProcessGroup) error {
		n := g.WorldSize()
		return g.Scatter(ctx, Float32s(make([]float32, 3)), Float32s(make([]float32, 3*n)), min(g.Rank(), 1))
	}},
	{"gather root", func(ctx context.Context, g *ProcessGroup) error {
		n := g.WorldSize()
		return g.Gather(ctx, Float32s(make([]float32, 3*n)), Float32s(make([]float32, 3)), min(g.Rank(), 1))
	}},
	{"all-gather length", func(ctx context.Context, g *ProcessGroup) error {
		n := 100 + g.Rank()
		return g.AllGather(ctx, Float32s(make([]float32, n*g.WorldSize())), Float32s(make([]float32, n)))
	}},
	{"barrier against all-reduce", func(ctx context.Context, g *ProcessGroup) error {
		if g.Rank() == 0 {
			return g.Barrier(ctx)
		}
		return g.AllReduce(ctx, Float32s(make([]float32, 4)), Sum)
	}},
}

func mismatchCasesScenario(rep *report) {
	for _, c := range mismatchCases {
		g, err := InitProcessGroup(context.Background(), workerOptions())
		if err != nil {
			rep.Error = err.Error()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = c.call(ctx, g)
		if err == nil {
			err = g.Barrier(ctx) // a sender that saw nothing learns at its next call
		}
		cancel()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		rep.Errors = append(rep.Errors, msg)
		_ = g.Destroy()
		// The next case's group uses the same port; let every rank leave.
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMismatchesFailEveryRank: a size, dtype, op or root disagreement is an
// error on every rank, on every path, without XLADDP_DISTRIBUTED_DEBUG. The
// shared-memory all-reduce used to return success everywhere with
// unreduced data when the lengths differed.
func TestMismatchesFailEveryRank(t *testing.T) {
	for _, shm := range []string{"16", "0"} {
		t.Run("XLADDP_SHM_MIB="+shm, func(t *testing.T) {
			cmds, outs := launch(t, "mismatch-cases", 2, "XLADDP_TEST_TIMEOUT=20s", EnvShmMiB+"="+shm)
			for _, rep := range waitReports(t, cmds, outs) {
				require.Empty(t, rep.Error, "rank %d", rep.Rank)
				require.Len(t, rep.Errors, len(mismatchCases), "rank %d", rep.Rank)
				for i, c := range mismatchCases {
					assert.Contains(t, rep.Errors[i], "ranks called different collectives", "rank %d: %s", rep.Rank, c.name)
					assert.NotContains(t, rep.Errors[i], "timed out", "rank %d: %s fails at once", rep.Rank, c.name)
				}
			}
		})
	}
}

// p2pSubsetsScenario: point-to-point messages between some ranks, then
// collectives of all ranks, repeatedly: the collectives' results must be
// right and nothing may hang.
func p2pSubsetsScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	n, r := g.WorldSize(), g.Rank()
	for round := range 3 {
		// Rank 0 sends to rank 1 (twice, tags out of order); the rest idle.
		switch r {
		case 0:
			for _, tagValue := range []uint32{7, 8} {
				if err := g.Send(ctx, Int64s([]int64{int64(100*round) + int64(tagValue)}), 1, tagValue); err != nil {
					rep.Error = err.Error()
					return
				}
			}
		case 1:
			for _, tagValue := range []uint32{8, 7} {
				got := []int64{0}
				if err := g.Recv(ctx, Int64s(got), 0, tagValue); err != nil {
					rep.Error = err.Error()
					return
				}
				if want := int64(100*round) + int64(tagValue); got[0] != want {
					rep.Failures = append(rep.Failures, fmt.Sprintf("round %d: Recv tag %d got %d, want %d", round, tagValue, got[0], want))
				}
			}
		}
		sum := []int64{int64(r + 1)}
		if err := g.AllReduce(ctx, Int64s(sum), Sum); err != nil {
			rep.Error = err.Error()
			return
		}
		if want := int64(n * (n + 1) / 2); sum[0] != want {
			rep.Failures = append(rep.Failures, fmt.Sprintf("round %d: AllReduce %d, want %d", round, sum[0], want))
		}
		// A chain through the last ranks only.
		if n > 2 && r >= n-2 {
			buf := []int64{int64(r)}
			if r == n-2 {
				if err := g.Send(ctx, Int64s(buf), n-1, 1); err != nil {
					rep.Error = err.Error()
					return
				}
			} else if err := g.Recv(ctx, Int64s(buf), n-2, 1); err != nil {
				rep.Error = err.Error()
				return
			}
		}
		b := []int64{int64(r * 10)}
		if err := g.Broadcast(ctx, Int64s(b), round%n); err != nil {
			rep.Error = err.Error()
			return
		}
		if want := int64((round % n) * 10); b[0] != want {
			rep.Failures = append(rep.Failures, fmt.Sprintf("round %d: Broadcast %d, want %d", round, b[0], want))
		}
		if err := g.Barrier(ctx); err != nil {
			rep.Error = err.Error()
			return
		}
	}
}

// TestPointToPointLeavesCollectivesAlone: Send/Recv between some ranks
// used to advance the collective numbering on those ranks only, so every
// later collective hung until the timeout and blamed an innocent rank.
func TestPointToPointLeavesCollectivesAlone(t *testing.T) {
	for _, world := range []int{3, 4} {
		t.Run(fmt.Sprintf("world %d", world), func(t *testing.T) {
			start := time.Now()
			cmds, outs := launch(t, "p2p-subsets", world, "XLADDP_TEST_TIMEOUT=10s")
			for _, rep := range waitReports(t, cmds, outs) {
				assert.Empty(t, rep.Error, "rank %d", rep.Rank)
				assert.Empty(t, rep.Failures, "rank %d", rep.Rank)
			}
			assert.Less(t, time.Since(start), 8*time.Second, "no collective waited out the timeout")
		})
	}
}

// destroyInFlightScenario: Destroy while goroutines keep issuing async
// collectives and point-to-point sends, on every rank: no panic (it used to
// be "send on closed channel"); each operation succeeds or fails with
// ErrGroupClosed (or with a peer's abort once the group broke); a
// SharedBuffer is an error after Destroy, and a slice kept from it reads
// zeros instead of faulting.
func destroyInFlightScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	shared, err := g.SharedBuffer(Float32, 1<<18)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	kept, err := Values[float32](shared)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	for i := range kept {
		kept[i] = 1
	}
	if err := g.AllReduce(ctx, shared, Sum); err != nil {
		rep.Error = err.Error()
		return
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				w := g.AllReduceAsync(Float32s(make([]float32, 1000)), Sum)
				err := w.Wait(ctx)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := g.Destroy(); err != nil {
		rep.Error = "Destroy: " + err.Error()
	}
	wg.Wait()
	closed := 0
	for _, err := range errs {
		var pe *PeerError
		switch {
		case err == nil:
		case errors.Is(err, ErrGroupClosed):
			closed++
		case errors.As(err, &pe):
		default:
			rep.Failures = append(rep.Failures, "unexpected error: "+err.Error())
		}
	}
	rep.Hashes["closed"] = strconv.Itoa(closed)
	if err := g.AllReduce(ctx, shared, Sum); !errors.Is(err, ErrGroupClosed) {
		rep.Failures = append(rep.Failures, fmt.Sprintf("AllReduce of a SharedBuffer after Destroy: %v", err))
	}
	if _, err := Values[float32](shared); !errors.Is(err, ErrGroupClosed) {
		rep.Failures = append(rep.Failures, fmt.Sprintf("Values of a SharedBuffer after Destroy: %v", err))
	}
	sum := float32(0)
	for _, v := range kept {
		sum += v
	}
	rep.Hashes["kept sum"] = fmt.Sprint(sum)
	if err := g.Destroy(); err != nil {
		rep.Failures = append(rep.Failures, "second Destroy: "+err.Error())
	}
}

func TestDestroyWithOperationsInFlight(t *testing.T) {
	cmds, outs := launch(t, "destroy-in-flight", 2, "XLADDP_TEST_TIMEOUT=10s", EnvShmMiB+"=16")
	for _, rep := range waitReports(t, cmds, outs) {
		assert.Empty(t, rep.Error, "rank %d", rep.Rank)
		assert.Empty(t, rep.Failures, "rank %d", rep.Rank)
		assert.Equal(t, "0", rep.Hashes["kept sum"], "rank %d: a kept slice reads zeros after Destroy", rep.Rank)
		assert.Equal(t, "shared memory", rep.Transport)
	}
}

// abandonedWaitScenario: rank 0 gives up on an all-reduce after 100 ms
// while rank 1 is late. Its buffer must not change after the call returns
// (the operation used to keep writing into it), and both ranks are told
// the group broke.
func abandonedWaitScenario(ctx context.Context, g *ProcessGroup, rep *report) {
	buf := make([]float32, 1<<20)
	for i := range buf {
		buf[i] = float32(g.Rank() + 1)
	}
	if g.Rank() == 1 {
		time.Sleep(500 * time.Millisecond)
		err := g.AllReduce(ctx, Float32s(buf), Sum)
		if err != nil {
			rep.Error = err.Error()
		}
		return
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := g.AllReduce(short, Float32s(buf), Sum)
	rep.Elapsed = time.Since(start).Seconds()
	if err != nil {
		rep.Error = err.Error()
	}
	snapshot := append([]float32(nil), buf...)
	time.Sleep(time.Second) // rank 1 arrives meanwhile
	for i := range buf {
		if buf[i] != snapshot[i] {
			rep.Failures = append(rep.Failures, fmt.Sprintf("buf[%d] changed from %g to %g after AllReduce returned", i, snapshot[i], buf[i]))
			break
		}
	}
	if err := g.Barrier(ctx); err == nil {
		rep.Failures = append(rep.Failures, "the group still works after an abandoned collective")
	}
}

func TestAbandonedCollectiveReleasesTheBuffer(t *testing.T) {
	for _, shm := range []string{"16", "0"} {
		t.Run("XLADDP_SHM_MIB="+shm, func(t *testing.T) {
			cmds, outs := launch(t, "abandoned-wait", 2, "XLADDP_TEST_TIMEOUT=10s", EnvShmMiB+"="+shm)
			reps := waitReports(t, cmds, outs)
			assert.Empty(t, reps[0].Failures)
			assert.Contains(t, reps[0].Error, "rank 0 stopped waiting for AllReduce #1")
			assert.Contains(t, reps[0].Error, "the process group is broken")
			assert.Less(t, reps[0].Elapsed, 1.0, "rank 0 returns soon after its deadline")
			assert.Contains(t, reps[1].Error, "rank 0", "rank 1 is told which rank left")
		})
	}
}

// defaultGroupScenario exercises the package-level API
// (smdistributed.dataparallel's): Init, the accessors, the collectives,
// Destroy, and their answers before Init and after Destroy.
func defaultGroupScenario(rep *report) {
	ctx := context.Background()
	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	if IsInitialized() || Rank() != -1 || WorldSize() != -1 || LocalRank() != -1 || LocalWorldSize() != -1 {
		fail("before Init: initialized=%v rank=%d world=%d", IsInitialized(), Rank(), WorldSize())
	}
	if err := AllReduce(ctx, Float32s([]float32{1}), Sum); err == nil || !strings.Contains(err.Error(), "call ddp.Init first") {
		fail("AllReduce before Init: %v", err)
	}
	if !IsAvailable() {
		fail("IsAvailable")
	}
	if err := Init(ctx, workerOptions()); err != nil {
		rep.Error = err.Error()
		return
	}
	if err := Init(ctx, workerOptions()); err == nil || !strings.Contains(err.Error(), "already initialized") {
		fail("second Init: %v", err)
	}
	n, r := WorldSize(), Rank()
	rep.Hashes["identity"] = fmt.Sprintf("%d/%d local %d/%d", r, n, LocalRank(), LocalWorldSize())
	sum := []float64{float64(r + 1)}
	if err := AllReduce(ctx, Float64s(sum), Avg); err != nil {
		fail("AllReduce: %v", err)
	} else if want := float64(n+1) / 2; sum[0] != want {
		fail("AllReduce Avg = %g, want %g", sum[0], want)
	}
	b := []int32{int32(r)}
	if err := Broadcast(ctx, Int32s(b), n-1); err != nil || b[0] != int32(n-1) {
		fail("Broadcast: %v %v", err, b)
	}
	out := make([]int64, n)
	if err := AllGather(ctx, Int64s(out), Int64s([]int64{int64(r * r)})); err != nil {
		fail("AllGather: %v", err)
	}
	for i, v := range out {
		if v != int64(i*i) {
			fail("AllGather[%d] = %d", i, v)
		}
	}
	in := make([]int32, n)
	for i := range in {
		in[i] = int32(r*100 + i)
	}
	got := make([]int32, n)
	if err := AllToAllSingle(ctx, Int32s(got), Int32s(in), nil, nil); err != nil {
		fail("AllToAllSingle: %v", err)
	}
	for i, v := range got {
		if v != int32(i*100+r) {
			fail("AllToAllSingle[%d] = %d", i, v)
		}
	}
	if err := Barrier(ctx); err != nil {
		fail("Barrier: %v", err)
	}
	if err := Destroy(); err != nil {
		fail("Destroy: %v", err)
	}
	if IsInitialized() || Rank() != -1 {
		fail("after Destroy: initialized=%v rank=%d", IsInitialized(), Rank())
	}
	if err := Destroy(); err != nil {
		fail("second Destroy: %v", err)
	}
}

func TestDefaultGroupAPI(t *testing.T) {
	cmds, outs := launch(t, "default-group", 3, "XLADDP_TEST_TIMEOUT=20s")
	for r, rep := range waitReports(t, cmds, outs) {
		assert.Empty(t, rep.Error, "rank %d", r)
		assert.Empty(t, rep.Failures, "rank %d", r)
		assert.Equal(t, fmt.Sprintf("%d/3 local %d/3", r, r), rep.Hashes["identity"])
	}
}

// TestNoSegmentLeftBehind: a segment whose creator died (a rank killed
// between creating and unlinking it) is removed by the next group's rank
// 0; a live process's segment is kept; a finished group leaves nothing.
func TestNoSegmentLeftBehind(t *testing.T) {
	if _, err := os.Stat(tcp.SegmentDir); err != nil {
		t.Skipf("no %s: %v", tcp.SegmentDir, err)
	}
	dead := deadPID(t)
	stale := filepath.Join(tcp.SegmentDir, fmt.Sprintf("%s%d-00ff", tcp.SegmentPrefix, dead))
	live := filepath.Join(tcp.SegmentDir, fmt.Sprintf("%s%d-00fe", tcp.SegmentPrefix, os.Getpid()))
	for _, p := range []string{stale, live} {
		require.NoError(t, os.WriteFile(p, nil, 0o600))
	}
	t.Cleanup(func() { os.Remove(live); os.Remove(stale) })
	cmds, outs := launch(t, "basic", 2, "XLADDP_TEST_TIMEOUT=10s", EnvShmMiB+"=16")
	for _, rep := range waitReports(t, cmds, outs) {
		require.Empty(t, rep.Error)
		assert.Equal(t, "shared memory", rep.Transport)
	}
	_, err := os.Stat(stale)
	assert.True(t, os.IsNotExist(err), "the dead job's segment is removed")
	_, err = os.Stat(live)
	assert.NoError(t, err, "a live process's segment is kept")
	// Other test packages run jobs meanwhile: only the segments of this
	// test's ranks count.
	for p := range segments(t) {
		for _, cmd := range cmds {
			assert.False(t, strings.HasPrefix(p, filepath.Join(tcp.SegmentDir, fmt.Sprintf("%s%d-", tcp.SegmentPrefix, cmd.Process.Pid))),
				"rank process %d left %s behind", cmd.Process.Pid, p)
		}
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

func segments(t *testing.T) map[string]bool {
	entries, err := os.ReadDir(tcp.SegmentDir)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tcp.SegmentPrefix) {
			out[filepath.Join(tcp.SegmentDir, e.Name())] = true
		}
	}
	return out
}
