package launch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// faultWorker is one rank of the fault suite (TestFaultSuite): every rank
// all-reduces twice (collectives #1 and #2), rank 1 then injects fault,
// and every rank all-reduces (#3) and meets in a barrier (#4).
func faultWorker(fault string) int {
	ctx := context.Background()
	fail := func(code int, err error) int {
		fmt.Fprintln(os.Stderr, "worker:", err)
		if dir := os.Getenv("XLADDP_TEST_DIR"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, "failed-"+os.Getenv("RANK")), nil, 0o644)
		}
		return code
	}
	if r, _ := strconv.Atoi(os.Getenv("RANK")); fault == "late-peer" && r == 1 {
		time.Sleep(time.Minute) // never joins the rendezvous in time
	}
	o := dist.NewOptions()
	o.Timeout, _ = time.ParseDuration(os.Getenv("XLADDP_TEST_TIMEOUT"))
	if err := dist.Init(ctx, o); err != nil {
		return fail(2, err)
	}
	defer dist.Destroy()
	g, rank := dist.Default(), dist.Rank()
	buf := dist.Float32s(make([]float32, 4))
	for range 2 {
		if err := g.AllReduce(ctx, buf, dist.Sum); err != nil {
			return fail(4, err)
		}
	}
	if fault == "checkpoint-subset" {
		return checkpointOnRankZero(ctx, g)
	}
	switch fault {
	case "evaluating": // every rank works outside the collectives a while, declaring it
		end := g.Busy("evaluating")
		time.Sleep(3 * time.Second)
		end()
	case "idle": // the same, undeclared
		time.Sleep(3 * time.Second)
	}
	if fault == "sigstop-inside" {
		// Rank 1 goes into collective #3 at once and stops inside it,
		// waiting for the others, who join it later.
		if rank == 1 {
			time.AfterFunc(300*time.Millisecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) })
		} else {
			time.Sleep(600 * time.Millisecond)
		}
	}
	if rank == 1 {
		switch fault {
		case "assert":
			panic("assertion failed: the loss is NaN") // a Go program's assert
		case "skip":
			if err := g.Barrier(ctx); err != nil {
				return fail(4, err)
			}
		case "shape":
			buf = dist.Float32s(make([]float32, 5))
		case "dtype":
			if err := g.AllReduce(ctx, dist.Float64s(make([]float64, 4)), dist.Sum); err != nil {
				return fail(4, err)
			}
		case "sigstop":
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			select {} // the stop takes every thread a moment
		case "sigkill":
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "slow-death":
			// A death the launcher reaps late (a loaded node): the peers
			// see the connections close, and have said so, before the
			// exit (however long a loaded machine takes them).
			shutDownSockets()
			waitForFiles(os.Getenv("XLADDP_TEST_DIR"), "failed-0", "failed-2")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "hang":
			select {} // until the job is stopped
		}
	}
	if err := g.AllReduce(ctx, buf, dist.Sum); err != nil {
		return fail(4, err)
	}
	if err := g.Barrier(ctx); err != nil {
		return fail(4, err)
	}
	return 0
}

// checkpointOnRankZero saves a checkpoint on rank 0 alone, the torch-xla
// mistake (xm.save inside `if rank == 0`): checkpoint.Save is a
// collective, so rank 0 waits in it while the others all-reduce.
func checkpointOnRankZero(ctx context.Context, g *dist.ProcessGroup) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "worker:", err); return 4 }
	d, closeEngine, err := cpuDevice(ctx)
	if err != nil {
		return fail(err)
	}
	defer closeEngine()
	l, err := nn.NewLinear(d, nn.NewRand(1), 3, 2, true)
	if err != nil {
		return fail(err)
	}
	model, err := ddp.Wrap(ctx, l)
	if err != nil {
		return fail(err)
	}
	if g.Rank() == 0 {
		path := filepath.Join(os.Getenv("XLADDP_TEST_DIR"), "ck.safetensors")
		if err := checkpoint.Save(ctx, path, optim.Checkpoint{Model: model}); err != nil {
			return fail(err)
		}
	}
	if err := g.AllReduce(ctx, dist.Float32s(make([]float32, 4)), dist.Sum); err != nil {
		return fail(err)
	}
	return 0
}

// isFault reports whether a worker scenario is one of the fault suite's.
func isFault(scenario string) (string, bool) { return strings.CutPrefix(scenario, "fault-") }

// shutDownSockets ends every socket of this process, as its death would.
func shutDownSockets() {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if n, err := strconv.Atoi(fd.Name()); err == nil {
			_ = syscall.Shutdown(n, syscall.SHUT_RDWR) // ENOTSOCK for the rest
		}
	}
}

// waitForFiles waits until every name exists in dir (a minute at most).
func waitForFiles(dir string, names ...string) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		all := true
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				all = false
			}
		}
		if all {
			return
		}
	}
}
